//! Link files packed ([`LinkPacks`], the server's [`LinkFiles`]): each
//! group of names (a round: the part of a name before its last `/`) is a
//! directory of append-only pack files, `pack-NNNNNN.lfp`, and a write
//! appends one frame to the group's open pack and waits for a sync that
//! may cover many writes (group commit): the uploads landing together share
//! one `fdatasync`, instead of each creating, syncing and renaming a file
//! and syncing its directory.
//!
//! A frame is `[magic "BBLP"][kind u8][key length u16][data length u32]
//! [data CRC-32][head CRC-32][key][data]` (little-endian); the head CRC
//! covers the 15 bytes before it and the key. `kind` is a put (the key's
//! bytes are the data) or a removal (no data). Opening a group reads the
//! heads of its packs in order (never the data) and keeps, per key, where
//! its last put is; a later frame replaces an earlier one, a removal forgets
//! the key. A pack is read up to its first frame that is not whole (a torn
//! tail a kill left): nothing after it is read, and nothing is ever appended
//! after it, since each opening of a group appends to a new pack.
//!
//! Invariants: a write returns `Ok` only once a sync that began after its
//! frame was appended succeeded; frames are appended and the index changed
//! under one lock, so the index follows the log's order; a full pack is
//! synced whole before the next opens; a pack whose sync failed, or whose
//! failed append could not be cut off, is never appended to again and
//! nothing in it after its last good sync is taken as durable. Each opening
//! of a group appends to a new pack, so nothing is ever appended after a
//! torn tail. Only the storage's writer ([`LinkPacks::writer`], the
//! server's) changes a pack when it opens a group: it cuts the frames at a
//! pack's end whose data fails its checksum (appends never synced), and
//! never bytes past the last whole frame (a damaged head may hide synced
//! frames). Readers ([`LinkPacks::new`]: an export beside the server, a
//! check) never change a pack; one that finds a pack gone (compacted)
//! reads the group's packs again. A removal appends its frame without waiting
//! for a sync (a removal a crash loses leaves bytes no result names) and,
//! on Linux, frees the whole blocks of the removed data (a hole punched in
//! the pack; the blocks at its edges, shared with the frames beside it,
//! are kept). A read that finds freed bytes looks the name up again, so a
//! removal racing it reads as "not found", not as damage. A key that could
//! be taken for a pack's file name is refused.
//!
//! Limits: a pack grows to [`MAX_PACK_BYTES`], then the next write opens a
//! new one; a key is at most [`MAX_KEY_BYTES`]; at most
//! [`MAX_CACHED_GROUPS`] groups stay open beyond those being written to (a
//! round's group is closed when the round ends). A group's index holds one
//! entry per live name (about 80 bytes with its key). A removed frame
//! keeps its head (19 bytes and its key) in the pack until the group is
//! compacted, and a name written again its older frame's bytes: when a
//! round ends, its packs are rewritten into one new pack of its live
//! frames if at least [`COMPACT_DEAD_SHARE`] of their bytes is dead
//! ([`LinkPacks::compact`], in the background), the older packs removed
//! oldest first.
//!
//! Unix only (positioned reads and writes).
//!
//! Why packs: under the load generator's default load, creating, syncing and
//! renaming a file per upload (and syncing its directory) was most of the
//! upload path's time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use beebot_shared::limits::{MAX_LINK_FILE_BYTES, MAX_SCAN_STATE_BYTES};

use super::links::{check_name, for_each_link, LinkFiles, LinkReadError};
use crate::model::JobRecord;
use crate::store::SyncObserver;

/// Visit the link records of a job kept under `links_dir` by a server
/// (read beside it): [`for_each_link`] over [`LinkPacks`].
pub fn for_each_job_link<E: std::error::Error + 'static>(
    links_dir: &Path,
    job: &JobRecord,
    f: impl FnMut(&beebot_shared::linkfile::LinkRecord) -> Result<(), E>,
) -> Result<(), LinkReadError<E>> {
    for_each_link(&LinkPacks::new(links_dir), job, f)
}

/// Largest pack before a write opens the next one (a frame larger than
/// what is left still goes whole into a pack of its own).
pub const MAX_PACK_BYTES: u64 = 1 << 30;
/// Longest key (a name's last part) a frame holds.
pub const MAX_KEY_BYTES: usize = 255;

const MAGIC: &[u8; 4] = b"BBLP";
const KIND_PUT: u8 = 1;
const KIND_REMOVE: u8 = 2;
/// Bytes of a frame's head before its key.
pub(crate) const HEAD_BYTES: usize = 19;
const PACK_PREFIX: &str = "pack-";
const PACK_SUFFIX: &str = ".lfp";

/// A position in a group's log: (pack number, bytes of it).
type Pos = (u32, u64);

/// Where a key's bytes are.
#[derive(Clone, Copy, Debug)]
struct Loc {
    pack: u32,
    offset: u64,
    len: u32,
    crc: u32,
}

/// Link files in pack files under a directory (the server's `links/`).
/// See the module docs.
#[derive(Debug)]
pub struct LinkPacks {
    dir: PathBuf,
    groups: Arc<Mutex<HashMap<String, Arc<Group>>>>,
    /// Compactions running in the background (see [`LinkPacks::compact`]).
    compacting: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Largest pack before the next is opened ([`MAX_PACK_BYTES`]).
    max_pack_bytes: u64,
    /// Whether this is the storage's writer, which cuts unsynced frames
    /// when it opens a group ([`LinkPacks::writer`]); readers never change
    /// a pack.
    cut_on_load: bool,
    counts: Arc<SyncCounts>,
}

/// What the writes of a [`LinkPacks`] cost in syncs: `writes / syncs` is
/// the mean group a sync made durable.
#[derive(Default)]
pub struct SyncCounts {
    /// Writes made durable (returned `Ok`).
    pub writes: AtomicU64,
    /// Syncs of a pack's data (`fdatasync`), each covering every write
    /// appended before it.
    pub syncs: AtomicU64,
    /// Told of each sync: how long it took and the frames it covered.
    observer: Option<Arc<dyn SyncObserver>>,
}

impl fmt::Debug for SyncCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncCounts")
            .field("writes", &self.writes)
            .field("syncs", &self.syncs)
            .finish_non_exhaustive()
    }
}

impl SyncCounts {
    fn synced(&self, took: Duration, frames: u64) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Some(o) = &self.observer {
            o.synced(took, frames);
        }
    }
}

#[derive(Debug)]
struct Group {
    dir: PathBuf,
    max_pack_bytes: u64,
    cut_on_load: bool,
    counts: Arc<SyncCounts>,
    state: Mutex<GroupState>,
    sync: Mutex<SyncState>,
    synced_cv: Condvar,
}

#[derive(Debug, Default)]
struct GroupState {
    loaded: bool,
    index: HashMap<String, Loc>,
    next_pack: u32,
    writer: Option<Writer>,
}

#[derive(Debug)]
struct Writer {
    pack: u32,
    file: Arc<File>,
    len: u64,
}

#[derive(Debug, Default)]
struct SyncState {
    /// End of the last append.
    written: Pos,
    /// Everything up to here is durable (but in `failed` packs).
    synced: Pos,
    /// The pack appended to, for the next sync.
    file: Option<Arc<File>>,
    /// Frames appended since the last sync began (the next one's group).
    pending: u64,
    syncing: bool,
    /// Packs whose sync failed: nothing in them is taken as durable since.
    failed: BTreeSet<u32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while a lock was held leaves whole frames only.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `name` split at its last `/`: (group, key).
fn split(name: &str) -> (&str, &str) {
    name.rsplit_once('/').unwrap_or(("", name))
}

fn pack_name(n: u32) -> String {
    format!("{PACK_PREFIX}{n:06}{PACK_SUFFIX}")
}

fn pack_number(file_name: &str) -> Option<u32> {
    file_name
        .strip_prefix(PACK_PREFIX)?
        .strip_suffix(PACK_SUFFIX)?
        .parse()
        .ok()
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// One frame, head, key and data.
fn frame(kind: u8, key: &str, data: &[u8]) -> io::Result<Vec<u8>> {
    frame_with_crc(kind, key, data, crc32fast::hash(data))
}

/// One frame whose data checksum is `data_crc` (a frame copied keeps the
/// checksum it was written with, so bytes damaged since still read as
/// damaged).
fn frame_with_crc(kind: u8, key: &str, data: &[u8], data_crc: u32) -> io::Result<Vec<u8>> {
    if key.len() > MAX_KEY_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{key:?} is longer than {MAX_KEY_BYTES} bytes"),
        ));
    }
    let data_len = u32::try_from(data.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} bytes do not fit in a pack frame", data.len()),
        )
    })?;
    let mut out = Vec::with_capacity(HEAD_BYTES + key.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.push(kind);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&data_len.to_le_bytes());
    out.extend_from_slice(&data_crc.to_le_bytes());
    out.extend_from_slice(&head_crc(&out[..15], key.as_bytes()).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(data);
    Ok(out)
}

fn head_crc(head: &[u8], key: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(key);
    h.finalize()
}

/// A frame's head as read back.
struct Head {
    kind: u8,
    key: String,
    data_len: u32,
    data_crc: u32,
}

/// Read the next frame's head from `r` at `offset` of a pack of `len`
/// bytes: `None` at the end, or where the pack stops being whole.
fn read_head(r: &mut impl Read, offset: u64, len: u64) -> Option<Head> {
    let mut head = [0u8; HEAD_BYTES];
    if offset + HEAD_BYTES as u64 > len || r.read_exact(&mut head).is_err() {
        return None;
    }
    let key_len = u16::from_le_bytes([head[5], head[6]]) as usize;
    let data_len = u32::from_le_bytes([head[7], head[8], head[9], head[10]]);
    let data_crc = u32::from_le_bytes([head[11], head[12], head[13], head[14]]);
    let crc = u32::from_le_bytes([head[15], head[16], head[17], head[18]]);
    if &head[..4] != MAGIC || key_len > MAX_KEY_BYTES {
        return None;
    }
    let end = offset + (HEAD_BYTES + key_len) as u64 + u64::from(data_len);
    if end > len {
        return None;
    }
    let mut key = vec![0u8; key_len];
    r.read_exact(&mut key).ok()?;
    if head_crc(&head[..15], &key) != crc {
        return None;
    }
    let kind = head[4];
    if kind != KIND_PUT && (kind != KIND_REMOVE || data_len != 0) {
        return None;
    }
    Some(Head {
        kind,
        key: String::from_utf8(key).ok()?,
        data_len,
        data_crc,
    })
}

/// A frame as replayed: where it starts, and where its data is (a put).
type Replayed = (u64, Option<Loc>);

/// Replay pack `n` at `path` into `index`; the bytes of it that are whole.
/// With `frames`, every frame is listed there too, in order.
fn replay(
    path: &Path,
    n: u32,
    index: &mut HashMap<String, Loc>,
    mut frames: Option<&mut Vec<Replayed>>,
) -> io::Result<u64> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut r = BufReader::with_capacity(64 * 1024, file);
    let mut offset = 0u64;
    while let Some(head) = read_head(&mut r, offset, len) {
        let start = offset;
        let data_offset = offset + (HEAD_BYTES + head.key.len()) as u64;
        r.seek_relative(i64::from(head.data_len))?;
        offset = data_offset + u64::from(head.data_len);
        let loc = (head.kind == KIND_PUT).then_some(Loc {
            pack: n,
            offset: data_offset,
            len: head.data_len,
            crc: head.data_crc,
        });
        if let Some(frames) = frames.as_deref_mut() {
            frames.push((start, loc));
        }
        match loc {
            Some(loc) => index.insert(head.key, loc),
            None => index.remove(&head.key),
        };
    }
    Ok(offset)
}

/// Most bytes one interrupted append leaves past a pack's last whole frame
/// (one frame of the largest link file or scan state): a longer unread tail
/// is damage, and the writer's opening logs it as such.
pub const MAX_TORN_TAIL_BYTES: u64 = (HEAD_BYTES
    + MAX_KEY_BYTES
    + if MAX_LINK_FILE_BYTES > MAX_SCAN_STATE_BYTES {
        MAX_LINK_FILE_BYTES
    } else {
        MAX_SCAN_STATE_BYTES
    }) as u64;

/// At the writer's opening, cut the frames at the end of the pack at `path`
/// (replayed as `frames`, whole up to `whole`) whose data does not match
/// their checksum: appends never synced, which a file system may show at
/// their full length with zeros inside after a power cut. Only when the
/// pack ends on a whole frame: bytes past `whole` (a torn append, or a
/// damaged head with frames after it) are never cut, since no frame is
/// ever appended after them and a damaged head may hide synced frames;
/// readers stop there. A damaged frame followed by a sound one is kept
/// (it reads as a checksum error). Returns the bytes kept.
fn cut_unsynced_frames(path: &Path, whole: u64, frames: &[Replayed]) -> io::Result<u64> {
    let len = fs::metadata(path)?.len();
    if len != whole {
        if len - whole.min(len) > MAX_TORN_TAIL_BYTES {
            tracing::error!(
                pack = %path.display(),
                whole,
                len,
                "a link pack stops being readable {} bytes before its end: \
                 the rest is kept but not read",
                len - whole
            );
        }
        return Ok(whole);
    }
    let mut keep = whole;
    let file = File::open(path)?;
    for &(start, loc) in frames.iter().rev() {
        let Some(loc) = loc else { break };
        let mut data = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut data, loc.offset)?;
        if crc32fast::hash(&data) == loc.crc {
            break;
        }
        keep = start;
    }
    if keep < whole {
        tracing::warn!(
            pack = %path.display(),
            "cut {} bytes of link files at the end of a pack that were never synced",
            whole - keep
        );
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(keep)?;
        f.sync_all()?;
    }
    Ok(keep)
}

/// The packs in `dir`, by number. A link file or state beside them
/// (`KEY.lf`, `KEY.state`: written by builds before 0.1.0, which 0.1.0 read
/// in place) is an error naming it: this build reads only packs, and a
/// result it cannot read must not pass for missing.
fn packs_in(dir: &Path) -> io::Result<BTreeMap<u32, PathBuf>> {
    let mut out = BTreeMap::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in rd {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_str().unwrap_or("");
        if let Some(n) = pack_number(name) {
            out.insert(n, entry.path());
        } else if name.ends_with(".lf") || name.ends_with(".state") {
            return Err(invalid(format!(
                "{}: a link file outside the packs, from a build before 0.1.0: \
                 read it with beebot-server 0.1.0 (this build reads only packs)",
                entry.path().display()
            )));
        }
    }
    Ok(out)
}

#[cfg(target_os = "linux")]
fn punch_hole(file: &File, offset: u64, len: u64) {
    use rustix::fs::{fallocate, FallocateFlags};
    // Freeing is best effort: a file system without holes keeps the bytes.
    let _ = fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        offset,
        len,
    );
}

#[cfg(not(target_os = "linux"))]
fn punch_hole(_file: &File, _offset: u64, _len: u64) {}

impl Group {
    /// The group's state, its packs replayed the first time; when the
    /// group is its writer's (`cut_on_load`), frames at a pack's end that
    /// were never synced are cut off then (see [`cut_unsynced_frames`]).
    fn loaded(&self) -> io::Result<MutexGuard<'_, GroupState>> {
        let mut st = lock(&self.state);
        if !st.loaded {
            let cut = self.cut_on_load;
            let mut index = HashMap::new();
            let mut packs = packs_in(&self.dir)?;
            let mut frames_cut = false;
            // A reader beside the writer may list a pack a compaction then
            // removes: it lists them again (the new pack is whole by then).
            for tries in 1.. {
                index.clear();
                let mut replayed = Ok(());
                for (&n, path) in &packs {
                    let mut frames = Vec::new();
                    let whole = match replay(path, n, &mut index, cut.then_some(&mut frames)) {
                        Ok(whole) => whole,
                        Err(e) => {
                            replayed = Err(e);
                            break;
                        }
                    };
                    if cut && cut_unsynced_frames(path, whole, &frames)? < whole {
                        frames_cut = true;
                    }
                }
                match replayed {
                    Err(e) if !cut && e.kind() == io::ErrorKind::NotFound && tries < 3 => {
                        packs = packs_in(&self.dir)?;
                    }
                    other => {
                        other?;
                        break;
                    }
                }
            }
            if frames_cut {
                // A cut frame may have replaced an earlier one of its key.
                index.clear();
                for (&n, path) in &packs {
                    replay(path, n, &mut index, None)?;
                }
            }
            st.index = index;
            st.next_pack = packs.keys().next_back().map_or(1, |n| n + 1);
            st.loaded = true;
        }
        Ok(st)
    }

    /// The group's state, its packs replayed again (a reader's, after the
    /// writer compacted them: the new pack is whole before an old one goes).
    fn reloaded(&self) -> io::Result<MutexGuard<'_, GroupState>> {
        {
            let mut st = lock(&self.state);
            st.loaded = false;
            st.index.clear();
        }
        self.loaded()
    }

    /// Rewrite the group's live frames into one new pack, then remove its
    /// older packs, when at least `min_dead_share` of their bytes is dead;
    /// `None` when nothing was done. See [`LinkPacks::compact`].
    fn compact(&self, min_dead_share: f64) -> io::Result<Option<Compacted>> {
        let mut st = self.loaded()?;
        // What was appended is made durable and its pack closed: the next
        // write opens a pack after the compacted one.
        if let Some(w) = st.writer.take() {
            self.wait_durable((w.pack, w.len))?;
        }
        if !lock(&self.sync).failed.is_empty() {
            // A pack whose sync failed holds frames never acknowledged.
            return Ok(None);
        }
        let packs = packs_in(&self.dir)?;
        let mut before = 0u64;
        for (&n, path) in &packs {
            let len = fs::metadata(path)?.len();
            if replay(path, n, &mut HashMap::new(), None)? != len {
                // Bytes no head reads (a torn tail, or a damaged head that
                // may hide synced frames) are never thrown away.
                return Ok(None);
            }
            before += len;
        }
        let frame_len = |key: &str, loc: &Loc| (HEAD_BYTES + key.len()) as u64 + u64::from(loc.len);
        let live: u64 = st.index.iter().map(|(k, l)| frame_len(k, l)).sum();
        let dead = before.saturating_sub(live);
        if packs.is_empty() || (dead as f64) < min_dead_share * before as f64 {
            return Ok(None);
        }
        let (n, file) = self.new_pack(&mut st)?;
        // In the order they lie in the packs (reads go forward).
        let mut keys: Vec<(String, Loc)> = st.index.iter().map(|(k, l)| (k.clone(), *l)).collect();
        keys.sort_by_key(|(_, l)| (l.pack, l.offset));
        let mut moved = HashMap::with_capacity(keys.len());
        let mut at = 0u64;
        let mut open: Option<(u32, File)> = None;
        for (key, loc) in &keys {
            if open.as_ref().is_none_or(|(p, _)| *p != loc.pack) {
                open = Some((loc.pack, File::open(self.dir.join(pack_name(loc.pack)))?));
            }
            let (_, src) = open.as_ref().expect("a pack to read");
            let mut data = vec![0u8; loc.len as usize];
            src.read_exact_at(&mut data, loc.offset)?;
            let f = frame_with_crc(KIND_PUT, key, &data, loc.crc)?;
            file.write_all_at(&f, at)?;
            moved.insert(
                key.clone(),
                Loc {
                    pack: n,
                    offset: at + (HEAD_BYTES + key.len()) as u64,
                    ..*loc
                },
            );
            at += f.len() as u64;
        }
        file.sync_all()?;
        File::open(&self.dir)?.sync_all()?;
        st.index = moved;
        // Oldest first: a removal's frame outlives the put it removes, so
        // a crash part way never brings a removed name back.
        for old in packs.values() {
            fs::remove_file(old)?;
        }
        File::open(&self.dir)?.sync_all()?;
        Ok(Some(Compacted {
            before,
            after: at,
            names: keys.len(),
        }))
    }

    /// Create the group's next pack (its number taken).
    fn new_pack(&self, st: &mut GroupState) -> io::Result<(u32, File)> {
        let n = st.next_pack;
        st.next_pack += 1;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.dir.join(pack_name(n)))?;
        Ok((n, file))
    }

    /// Append `frame` to the open pack (opening one first); the end of the
    /// frame and where it starts. A full pack is made durable whole before
    /// the next is opened (so a later sync never has to reach back into
    /// it), and a pack whose sync failed is never appended to again.
    fn append(&self, st: &mut GroupState, frame: &[u8]) -> io::Result<(Pos, u64)> {
        if let Some(w) = &st.writer {
            let failed = lock(&self.sync).failed.contains(&w.pack);
            if failed {
                st.writer = None;
            } else if w.len > 0 && w.len + frame.len() as u64 > self.max_pack_bytes {
                let end = (w.pack, w.len);
                // Never appended to again, whatever the sync says.
                st.writer = None;
                self.wait_durable(end)?;
            }
        }
        if st.writer.is_none() {
            beebot_shared::util::create_private_dir(&self.dir)?;
            let (n, file) = self.new_pack(st)?;
            File::open(&self.dir)?.sync_all()?;
            st.writer = Some(Writer {
                pack: n,
                file: Arc::new(file),
                len: 0,
            });
        }
        let w = st.writer.as_mut().expect("a pack to append to");
        let start = w.len;
        if let Err(e) = w.file.write_all_at(frame, start) {
            // Cut the torn frame off; a pack that cannot be cut is never
            // appended to again, and nothing in it is taken as durable
            // (its readers stop at the torn frame).
            if w.file.set_len(start).is_err() {
                lock(&self.sync).failed.insert(w.pack);
                st.writer = None;
            }
            return Err(e);
        }
        w.len += frame.len() as u64;
        let end = (w.pack, w.len);
        let mut s = lock(&self.sync);
        s.written = end;
        s.file = Some(w.file.clone());
        s.pending += 1;
        Ok((end, start))
    }

    /// Wait until everything up to `end` is durable, syncing it if no other
    /// writer is. Takes only the sync lock (never the state lock), so a
    /// caller holding the state lock may wait here.
    fn wait_durable(&self, end: Pos) -> io::Result<()> {
        let mut s = lock(&self.sync);
        loop {
            if s.synced >= end {
                return Ok(());
            }
            if s.failed.contains(&end.0) {
                return Err(io::Error::other(format!(
                    "syncing {} failed",
                    self.dir.join(pack_name(end.0)).display()
                )));
            }
            if s.syncing {
                s = self
                    .synced_cv
                    .wait(s)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            s.syncing = true;
            let target = s.written;
            let file = s.file.clone();
            let frames = std::mem::take(&mut s.pending);
            drop(s);
            let began = Instant::now();
            let synced = file.map_or(Ok(()), |f| f.sync_data());
            // Told while still the syncer (the writers meanwhile append for
            // the next sync); a panic there still hands the turn over.
            let told = synced.is_ok().then(|| {
                let took = began.elapsed();
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.counts.synced(took, frames)
                }))
            });
            s = lock(&self.sync);
            s.syncing = false;
            match synced {
                Ok(()) => s.synced = s.synced.max(target),
                // Linux reports a failed writeback once: the pack's frames
                // are never taken as durable, and it is never appended to.
                Err(_) => {
                    s.failed.insert(target.0);
                }
            }
            self.synced_cv.notify_all();
            if let Some(Err(panic)) = told {
                drop(s);
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl LinkPacks {
    /// Link files under `dir` (created on the first write), for reading
    /// beside the storage's writer (an export, a check) or for tests.
    pub fn new(dir: impl Into<PathBuf>) -> LinkPacks {
        LinkPacks::with_pack_limit(dir, MAX_PACK_BYTES)
    }

    /// The storage's one writer (the server's): when it opens a group, it
    /// cuts the frames at a pack's end that were never synced.
    pub fn writer(dir: impl Into<PathBuf>) -> LinkPacks {
        LinkPacks {
            cut_on_load: true,
            ..LinkPacks::new(dir)
        }
    }

    /// Link files under `dir` in packs of at most `max_pack_bytes` (a
    /// frame larger than that still goes whole into a pack of its own).
    pub fn with_pack_limit(dir: impl Into<PathBuf>, max_pack_bytes: u64) -> LinkPacks {
        let dir = dir.into();
        LinkPacks {
            dir,
            groups: Arc::default(),
            compacting: Mutex::default(),
            max_pack_bytes,
            cut_on_load: false,
            counts: Arc::default(),
        }
    }

    /// The same, telling `observer` of every sync (the server's metrics):
    /// how long it took and how many frames it made durable.
    pub fn observed(mut self, observer: Arc<dyn SyncObserver>) -> LinkPacks {
        self.counts = Arc::new(SyncCounts {
            observer: Some(observer),
            ..SyncCounts::default()
        });
        self
    }

    /// Writes and syncs so far (see [`SyncCounts`]).
    pub fn counts(&self) -> &SyncCounts {
        &self.counts
    }

    /// Rewrite `group`'s live link files into one new pack and remove its
    /// older packs, when at least `min_dead_share` of their bytes is no
    /// longer named (removed, written again, a frame never synced); `None`
    /// when nothing was done. Reads and writes of the group wait meanwhile.
    /// A crash part way leaves the old packs beside the new one (the same
    /// names, read from the newer pack) or some of them (oldest removed
    /// first). Nothing is done while a pack of the group holds bytes no
    /// head reads or a sync of it failed. The storage's writer only.
    pub fn compact(&self, group: &str, min_dead_share: f64) -> io::Result<Option<Compacted>> {
        if !self.cut_on_load {
            return Err(io::Error::other(
                "only the storage's writer compacts its packs",
            ));
        }
        self.group(group).compact(min_dead_share)
    }

    /// Wait for the compactions started in the background to end.
    pub fn wait_compactions(&self) {
        let running = std::mem::take(&mut *lock(&self.compacting));
        for h in running {
            let _ = h.join();
        }
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn group(&self, name: &str) -> Arc<Group> {
        let mut groups = lock(&self.groups);
        if let Some(g) = groups.get(name) {
            return g.clone();
        }
        if groups.len() >= MAX_CACHED_GROUPS {
            // Groups nobody writes to are read again when asked for.
            groups.retain(|_, g| Arc::strong_count(g) > 1 || lock(&g.state).writer.is_some());
        }
        let g = Arc::new(Group {
            max_pack_bytes: self.max_pack_bytes,
            cut_on_load: self.cut_on_load,
            counts: self.counts.clone(),
            dir: if name.is_empty() {
                self.dir.clone()
            } else {
                self.dir.join(name)
            },
            state: Mutex::default(),
            sync: Mutex::default(),
            synced_cv: Condvar::new(),
        });
        groups.insert(name.to_string(), g.clone());
        g
    }

    /// The live names of `group`, each `group/key`.
    fn group_names(&self, group: &str, out: &mut Vec<String>) -> io::Result<()> {
        let g = self.group(group);
        let st = g.loaded()?;
        let full = |key: &str| {
            if group.is_empty() {
                key.to_string()
            } else {
                format!("{group}/{key}")
            }
        };
        let keys: BTreeSet<String> = st.index.keys().map(|k| full(k)).collect();
        out.extend(keys);
        Ok(())
    }

    /// Read `loc` of `group`'s `key`; `None` when its bytes do not match
    /// their checksum.
    fn read_at(g: &Group, loc: Loc) -> io::Result<Option<Vec<u8>>> {
        let file = File::open(g.dir.join(pack_name(loc.pack)))?;
        let mut data = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut data, loc.offset)?;
        Ok((crc32fast::hash(&data) == loc.crc).then_some(data))
    }
}

/// Compact round `name`'s group `g` (when dead enough; what happened is
/// logged), then close it unless it is written to again meanwhile.
fn compact_and_close(groups: &Mutex<HashMap<String, Arc<Group>>>, name: &str, g: &Arc<Group>) {
    match g.compact(COMPACT_DEAD_SHARE) {
        Ok(Some(c)) => tracing::info!(
            round = %name,
            before = c.before,
            after = c.after,
            names = c.names,
            "link packs compacted"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(round = %name, "compacting the link packs: {e}"),
    }
    let mut groups = lock(groups);
    let idle = groups
        .get(name)
        .is_some_and(|now| Arc::ptr_eq(now, g) && lock(&g.state).writer.is_none());
    if idle {
        groups.remove(name);
    }
}

/// Most compactions running at once in the background (each a thread
/// copying one round's live files).
pub const MAX_COMPACTIONS: usize = 2;

/// A round's packs are compacted when it ends if at least this share of
/// their bytes is no longer named (results replaced or dropped by
/// validation, frames written again, removals' own frames).
pub const COMPACT_DEAD_SHARE: f64 = 0.25;

/// What a compaction did: the group's pack bytes before and after, and
/// the live names copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted {
    pub before: u64,
    pub after: u64,
    pub names: usize,
}

/// Most groups (rounds) a [`LinkPacks`] keeps open: past it, the groups
/// not written to since they were opened are closed (and read again when
/// asked for). A group's memory is its index, about 80 bytes a name.
pub const MAX_CACHED_GROUPS: usize = 16;

/// `name`, split into (group, key), refused when the contract refuses it
/// or its key could be taken for a pack's own file name.
fn checked(name: &str) -> io::Result<(&str, &str)> {
    check_name(name)?;
    let (group, key) = split(name);
    if pack_number(key).is_some() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} names a link pack, not a link file"),
        ));
    }
    Ok((group, key))
}

/// Free the whole blocks of `[offset, offset + len)` of `file`: the blocks
/// at its edges are kept, since they hold the frames beside it.
fn free_blocks(file: &File, offset: u64, len: u64) {
    const BLOCK: u64 = 4096;
    let first = offset.div_ceil(BLOCK) * BLOCK;
    let end = (offset + len) / BLOCK * BLOCK;
    if end > first {
        punch_hole(file, first, end - first);
    }
}

impl LinkFiles for LinkPacks {
    fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let (group, key) = checked(name)?;
        let frame = frame(KIND_PUT, key, bytes)?;
        let g = self.group(group);
        let end = {
            let mut st = g.loaded()?;
            let (end, start) = g.append(&mut st, &frame)?;
            let loc = Loc {
                pack: end.0,
                offset: start + (HEAD_BYTES + key.len()) as u64,
                len: bytes.len() as u32,
                crc: crc32fast::hash(bytes),
            };
            st.index.insert(key.to_string(), loc);
            end
        };
        g.wait_durable(end)?;
        self.counts.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let (group, key) = checked(name)?;
        let g = self.group(group);
        let loc = g.loaded()?.index.get(key).copied();
        let Some(mut loc) = loc else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no link file {name}", self.dir.display()),
            ));
        };
        // A removal (or a new write of the name) between the look-up and
        // the read frees or replaces the bytes: look again before calling
        // them damaged.
        for _ in 0..2 {
            match Self::read_at(&g, loc) {
                Ok(Some(data)) => return Ok(data),
                Ok(None) => {}
                // Its pack compacted away since: look it up again (a
                // reader beside the writer reads the packs again first).
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let now = if self.cut_on_load {
                        g.loaded()?.index.get(key).copied()
                    } else {
                        g.reloaded()?.index.get(key).copied()
                    };
                    match now {
                        Some(now) if (now.pack, now.offset) != (loc.pack, loc.offset) => {
                            loc = now;
                            continue;
                        }
                        _ => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
            match g.loaded()?.index.get(key).copied() {
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{name} was removed"),
                    ))
                }
                Some(now) if (now.pack, now.offset) != (loc.pack, loc.offset) => loc = now,
                Some(_) => break,
            }
        }
        Err(invalid(format!(
            "{}: the bytes of {name} at {} do not match their checksum",
            g.dir.join(pack_name(loc.pack)).display(),
            loc.offset
        )))
    }

    fn remove(&self, name: &str) {
        let Ok((group, key)) = checked(name) else {
            return;
        };
        let g = self.group(group);
        if let Ok(mut st) = g.loaded() {
            if let Some(loc) = st.index.remove(key) {
                if let Ok(frame) = frame(KIND_REMOVE, key, &[]) {
                    // A removal that does not land leaves bytes no result
                    // names (the key comes back at the next opening).
                    let _ = g.append(&mut st, &frame);
                }
                let (offset, len) = (loc.offset, u64::from(loc.len));
                if let Some(w) = st.writer.as_ref().filter(|w| w.pack == loc.pack) {
                    free_blocks(&w.file, offset, len);
                } else if let Ok(f) = OpenOptions::new()
                    .write(true)
                    .open(g.dir.join(pack_name(loc.pack)))
                {
                    free_blocks(&f, offset, len);
                }
            }
        };
    }

    fn sweep_temporaries(&self, round_id: u64) {
        // Opened now (the writer cutting what was never synced) rather
        // than at the round's first upload.
        if let Err(e) = self.group(&round_id.to_string()).loaded() {
            tracing::error!(round_id, "cannot read the round's link packs: {e}");
        }
    }

    fn compact_ended(&self, round_id: u64) {
        if self.cut_on_load {
            let name = round_id.to_string();
            let g = self.group(&name);
            compact_and_close(&self.groups, &name, &g);
        }
    }

    fn forget_round(&self, round_id: u64) {
        let name = round_id.to_string();
        let group = lock(&self.groups).get(&name).cloned();
        let Some(g) = group.filter(|_| self.cut_on_load) else {
            lock(&self.groups).remove(&name);
            return;
        };
        // Compacted in the background, then closed (a write meanwhile
        // waits for it, on the same group); past MAX_COMPACTIONS running,
        // closed now and left to the check at the next start.
        let mut running = lock(&self.compacting);
        running.retain(|h| !h.is_finished());
        if running.len() >= MAX_COMPACTIONS {
            drop(running);
            lock(&self.groups).remove(&name);
            tracing::info!(round = %name, "compactions busy: this round's waits for the next start");
            return;
        }
        let groups = self.groups.clone();
        let compaction = std::thread::Builder::new()
            .name(format!("compact-{name}"))
            .spawn(move || compact_and_close(&groups, &name, &g));
        match compaction {
            Ok(h) => running.push(h),
            Err(e) => tracing::warn!(round = round_id, "cannot start a compaction: {e}"),
        }
    }

    fn location(&self, name: &str) -> String {
        let (group, _) = split(name);
        format!(
            "{} (packed in {})",
            self.dir.join(name).display(),
            self.dir.join(group).display()
        )
    }

    fn names(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        let mut groups = vec![String::new()];
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Some(n) = entry.file_name().to_str() {
                    groups.push(n.to_string());
                }
            }
        }
        for group in &groups {
            self.group_names(group, &mut out)?;
        }
        out.sort();
        Ok(out)
    }
}

/// What a directory's packs hold, for checks from outside the server (a
/// crash test): per pack, its length and the bytes of it that are whole.
/// A pack a compaction removes while it is read makes it list them again
/// (a few times at most).
pub fn pack_files(dir: &Path) -> io::Result<Vec<(PathBuf, u64, u64)>> {
    let mut tries = 0;
    loop {
        tries += 1;
        match packs_now(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 5 => continue,
            other => return other,
        }
    }
}

fn packs_now(dir: &Path) -> io::Result<Vec<(PathBuf, u64, u64)>> {
    let mut out = Vec::new();
    for (n, path) in packs_in(dir)? {
        let len = fs::metadata(&path)?.len();
        let whole = replay(&path, n, &mut HashMap::new(), None)?;
        out.push((path, len, whole));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
