//! Link packs: reopening, torn tails, group commit, removal, limits,
//! compaction.

use super::*;
use std::io::Write;

fn packs_of(dir: &Path) -> Vec<(PathBuf, u64, u64)> {
    pack_files(dir).expect("packs")
}

#[test]
fn a_reopened_directory_reads_what_was_written_and_forgets_what_was_removed() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    links.write("7/1-1.lf", b"one").unwrap();
    links.write("7/2-2.lf", b"two").unwrap();
    links.write("7/2-2.state", b"state").unwrap();
    links.write("8/3-3.lf", b"other round").unwrap();
    links.write("7/1-1.lf", b"one again").unwrap();
    links.remove("7/2-2.lf");
    drop(links);
    let again = LinkPacks::new(dir.path());
    assert_eq!(again.read("7/1-1.lf").unwrap(), b"one again");
    assert_eq!(
        again.read("7/2-2.lf").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(again.read("7/2-2.state").unwrap(), b"state");
    assert_eq!(again.read("8/3-3.lf").unwrap(), b"other round");
    assert_eq!(
        again.names().unwrap(),
        vec!["7/1-1.lf", "7/2-2.state", "8/3-3.lf"]
    );
    // The reopening writes to a pack of its own; the first stays as it was.
    let before = packs_of(&dir.path().join("7"));
    assert_eq!(before.len(), 1);
    again.write("7/4-4.lf", b"four").unwrap();
    let after = packs_of(&dir.path().join("7"));
    assert_eq!(after.len(), 2);
    assert_eq!(after[0], before[0], "an earlier pack is never appended to");
    assert!(after.iter().all(|(_, len, whole)| len == whole));
}

#[test]
fn a_torn_tail_is_not_read_kept_as_it_is_and_never_appended_after() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    let links = LinkPacks::writer(dir.path());
    links.write("7/1-1.lf", b"whole").unwrap();
    links.write("7/2-2.lf", b"torn by a kill").unwrap();
    drop(links);
    let (path, len, _) = packs_of(&round).remove(0);
    // A kill mid-append: the last frame lacks its last bytes.
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let reader = LinkPacks::new(dir.path());
    assert_eq!(reader.read("7/1-1.lf").unwrap(), b"whole");
    assert!(reader.read("7/2-2.lf").is_err(), "a torn frame is not read");
    assert_eq!(reader.names().unwrap(), vec!["7/1-1.lf"]);
    let writer = LinkPacks::writer(dir.path());
    writer.sweep_temporaries(7);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        len - 3,
        "bytes past the last whole frame are kept"
    );
    writer.write("7/2-2.lf", b"sent again").unwrap();
    assert_eq!(writer.read("7/2-2.lf").unwrap(), b"sent again");
    let packs = packs_of(&round);
    assert_eq!(packs.len(), 2, "the new write went to a pack of its own");
    assert_eq!(packs[0].1, len - 3, "nothing appended after a torn tail");
    assert_eq!(packs[1].1, packs[1].2);
    assert_eq!(
        LinkPacks::new(dir.path()).read("7/2-2.lf").unwrap(),
        b"sent again"
    );
}

#[test]
fn a_damaged_frame_is_refused_by_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    links
        .write("7/1-1.lf", b"the bytes of a link file")
        .unwrap();
    let (path, len, _) = packs_of(&dir.path().join("7")).remove(0);
    // Flip the data's last byte.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, len - 1).unwrap();
    f.write_all_at(&[b[0] ^ 0x20], len - 1).unwrap();
    let e = links.read("7/1-1.lf").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("checksum"), "{e}");
    // A damaged head stops the replay there: the frame is not listed, and
    // the writer's opening cuts nothing (a damaged head may hide frames
    // that were synced).
    f.write_all_at(b"XX", 0).unwrap();
    assert!(LinkPacks::new(dir.path()).names().unwrap().is_empty());
    LinkPacks::writer(dir.path()).sweep_temporaries(7);
    assert_eq!(fs::metadata(&path).unwrap().len(), len);
}

#[test]
fn writes_appended_before_a_sync_are_made_durable_by_that_one_sync() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    let g = links.group("7");
    let mut ends = Vec::new();
    {
        let mut st = g.loaded().unwrap();
        for key in ["1-1.lf", "2-2.lf", "3-3.lf"] {
            let f = frame(KIND_PUT, key, key.as_bytes()).unwrap();
            ends.push(g.append(&mut st, &f).unwrap().0);
        }
    }
    assert_eq!(links.counts().syncs.load(Ordering::Relaxed), 0);
    // The last writer syncs; the earlier ones find their frames durable.
    g.wait_durable(ends[2]).unwrap();
    g.wait_durable(ends[0]).unwrap();
    g.wait_durable(ends[1]).unwrap();
    assert_eq!(links.counts().syncs.load(Ordering::Relaxed), 1);
}

#[test]
fn concurrent_writers_each_land_whole_and_share_syncs() {
    const THREADS: usize = 8;
    const EACH: usize = 25;
    /// A slow disk: each sync takes 20 ms, while the other writers append.
    struct Slow;
    impl SyncObserver for Slow {
        fn synced(&self, _took: Duration, _group: u64) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let links = Arc::new(LinkPacks::new(dir.path()).observed(Arc::new(Slow)));
    let start = Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (links, start) = (links.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..EACH {
                    let data = vec![t as u8; 1000 + i];
                    links.write(&format!("7/{t}-{i}.lf"), &data).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let counts = links.counts();
    let writes = counts.writes.load(Ordering::Relaxed);
    let syncs = counts.syncs.load(Ordering::Relaxed);
    assert_eq!(writes, (THREADS * EACH) as u64);
    // One writer at a time syncs; the others append meanwhile and are
    // covered by the next sync (with one sync per write they would take
    // 200 × 20 ms).
    assert!(syncs * 2 <= writes, "{syncs} syncs for {writes} writes");
    let again = LinkPacks::new(dir.path());
    assert_eq!(again.names().unwrap().len(), THREADS * EACH);
    for t in 0..THREADS {
        for i in 0..EACH {
            assert_eq!(
                again.read(&format!("7/{t}-{i}.lf")).unwrap(),
                vec![t as u8; 1000 + i]
            );
        }
    }
}

#[test]
fn a_full_pack_is_synced_and_the_next_write_opens_another() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::with_pack_limit(dir.path(), 4096);
    for i in 0..10 {
        links
            .write(&format!("7/{i}-{i}.lf"), &[i as u8; 1000])
            .unwrap();
    }
    // A frame larger than a pack goes whole into one of its own.
    links.write("7/big-1.lf", &[9u8; 10_000]).unwrap();
    let packs = packs_of(&dir.path().join("7"));
    assert!(packs.len() >= 4, "{packs:?}");
    for (path, len, whole) in &packs[..packs.len() - 1] {
        assert_eq!(len, whole, "{}", path.display());
        assert!(*len <= 4096 || *len > 10_000, "{}: {len}", path.display());
    }
    let again = LinkPacks::new(dir.path());
    for i in 0..10 {
        assert_eq!(
            again.read(&format!("7/{i}-{i}.lf")).unwrap(),
            [i as u8; 1000]
        );
    }
    assert_eq!(again.read("7/big-1.lf").unwrap(), [9u8; 10_000]);
}

#[cfg(target_os = "linux")]
#[test]
fn a_removal_frees_the_blocks_of_what_it_removed() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    links.write("7/1-1.lf", &vec![7u8; 4 << 20]).unwrap();
    links.write("7/2-2.lf", b"kept").unwrap();
    let path = packs_of(&dir.path().join("7")).remove(0).0;
    let blocks = fs::metadata(&path).unwrap().blocks();
    links.remove("7/1-1.lf");
    let after = fs::metadata(&path).unwrap().blocks();
    assert!(
        after * 4 < blocks,
        "blocks of 512 bytes: {blocks} before, {after} after"
    );
    assert_eq!(links.read("7/2-2.lf").unwrap(), b"kept");
    let again = LinkPacks::new(dir.path());
    assert_eq!(again.names().unwrap(), vec!["7/2-2.lf"]);
}

#[test]
fn a_link_file_outside_the_packs_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    fs::create_dir_all(&round).unwrap();
    fs::write(round.join("1-1.lf"), b"plain").unwrap();
    let links = LinkPacks::new(dir.path());
    let e = links.read("7/1-1.lf").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(
        e.to_string().contains("1-1.lf") && e.to_string().contains("0.1.0"),
        "{e}"
    );
    assert!(links.names().is_err(), "not listed as if it were not there");
    assert!(round.join("1-1.lf").exists(), "left as it is");
}

#[test]
fn a_read_racing_a_removal_says_not_found_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    links.write("7/1-1.lf", &vec![5u8; 3 * 4096]).unwrap();
    let g = links.group("7");
    let loc = g.loaded().unwrap().index["1-1.lf"];
    links.remove("7/1-1.lf");
    // The bytes looked up before the removal are freed now.
    assert!(LinkPacks::read_at(&g, loc).unwrap().is_none());
    let e = links.read("7/1-1.lf").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
}

#[test]
fn a_removal_frees_only_whole_blocks_and_spares_the_frames_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::writer(dir.path());
    links.write("7/1-1.lf", b"before").unwrap();
    links.write("7/2-2.lf", &vec![2u8; 10_000]).unwrap();
    links.write("7/3-3.lf", b"after").unwrap();
    links.remove("7/2-2.lf");
    drop(links);
    let again = LinkPacks::writer(dir.path());
    again.sweep_temporaries(7);
    assert_eq!(again.read("7/1-1.lf").unwrap(), b"before");
    assert_eq!(again.read("7/3-3.lf").unwrap(), b"after");
    assert_eq!(again.names().unwrap(), vec!["7/1-1.lf", "7/3-3.lf"]);
}

#[test]
fn a_forgotten_round_and_groups_past_the_cache_are_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::writer(dir.path());
    for round in 0..(MAX_CACHED_GROUPS + 4) {
        links.write(&format!("{round}/1-1.lf"), b"x").unwrap();
        links.forget_round(round as u64);
    }
    links.wait_compactions();
    assert!(lock(&links.groups).len() <= 1);
    for round in 0..(MAX_CACHED_GROUPS + 4) {
        assert_eq!(links.read(&format!("{round}/1-1.lf")).unwrap(), b"x");
    }
    assert!(lock(&links.groups).len() <= MAX_CACHED_GROUPS);
    // A forgotten round written again goes on in a pack of its own.
    links.write("0/2-2.lf", b"late").unwrap();
    assert_eq!(packs_of(&dir.path().join("0")).len(), 2);
    assert_eq!(
        LinkPacks::new(dir.path()).read("0/2-2.lf").unwrap(),
        b"late"
    );
}

#[test]
fn a_key_past_its_limit_or_a_bad_name_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    let long = format!("7/{}.lf", "x".repeat(MAX_KEY_BYTES));
    assert_eq!(
        links.write(&long, b"x").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        links.write("7/../x.lf", b"x").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    // A name that could be taken for a pack's own file.
    links.write("7/1-1.lf", b"kept").unwrap();
    let pack = format!("7/{}", pack_name(1));
    assert_eq!(
        links.write(&pack, b"x").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert!(links.read(&pack).is_err());
    links.remove(&pack);
    assert_eq!(links.read("7/1-1.lf").unwrap(), b"kept");
    links.remove("7/1-1.lf");
    assert!(links.names().unwrap().is_empty());
}

#[test]
fn garbage_after_a_head_is_refused_when_read_and_cut_by_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    fs::create_dir_all(&round).unwrap();
    let path = round.join(pack_name(1));
    let mut f = File::create(&path).unwrap();
    // A whole head naming 100 bytes of data, then random bytes: the data
    // does not match the head's checksum.
    let mut fake = frame(KIND_PUT, "1-1.lf", &[1u8; 100]).unwrap();
    fake.truncate(HEAD_BYTES + 10);
    f.write_all(&fake).unwrap();
    f.write_all(&[0xAB; 300]).unwrap();
    drop(f);
    let reader = LinkPacks::new(dir.path());
    assert_eq!(reader.names().unwrap(), vec!["7/1-1.lf"]);
    let e = reader.read("7/1-1.lf").unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
    let writer = LinkPacks::writer(dir.path());
    writer.sweep_temporaries(7);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        329,
        "bytes after it kept"
    );
    writer.write("7/1-1.lf", b"real").unwrap();
    assert_eq!(writer.read("7/1-1.lf").unwrap(), b"real");
    assert_eq!(
        LinkPacks::new(dir.path()).read("7/1-1.lf").unwrap(),
        b"real",
        "the later frame wins"
    );
}

#[test]
fn frames_at_the_end_never_synced_are_cut_and_what_they_replaced_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    links.write("7/1-1.lf", b"first, synced").unwrap();
    links.write("7/2-2.lf", b"sound").unwrap();
    drop(links);
    let (path, _, _) = packs_of(&dir.path().join("7")).remove(0);
    // Two appends a power cut showed at full length with zeros inside: a
    // second copy of 1-1 and a new 3-3.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    for (key, data) in [("1-1.lf", &b"second, lost"[..]), ("3-3.lf", b"lost")] {
        let mut torn = frame(KIND_PUT, key, data).unwrap();
        let n = torn.len();
        torn[n - data.len()..].fill(0);
        f.write_all(&torn).unwrap();
    }
    drop(f);
    let reader = LinkPacks::new(dir.path());
    assert!(reader.read("7/1-1.lf").is_err());
    reader.sweep_temporaries(7);
    assert!(reader.read("7/1-1.lf").is_err(), "a reader cuts nothing");
    let writer = LinkPacks::writer(dir.path());
    writer.sweep_temporaries(7);
    assert_eq!(writer.read("7/1-1.lf").unwrap(), b"first, synced");
    assert_eq!(writer.read("7/2-2.lf").unwrap(), b"sound");
    assert_eq!(writer.names().unwrap(), vec!["7/1-1.lf", "7/2-2.lf"]);
    assert!(packs_of(&dir.path().join("7"))
        .iter()
        .all(|(_, l, w)| l == w));
}

#[test]
fn a_damaged_frame_before_a_sound_one_is_kept_for_a_look() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::new(dir.path());
    links.write("7/1-1.lf", b"damaged later").unwrap();
    links.write("7/2-2.lf", b"sound").unwrap();
    drop(links);
    let (path, len, _) = packs_of(&dir.path().join("7")).remove(0);
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    let at = (HEAD_BYTES + "1-1.lf".len()) as u64;
    f.write_all_at(b"XX", at).unwrap();
    let writer = LinkPacks::writer(dir.path());
    writer.sweep_temporaries(7);
    assert_eq!(fs::metadata(&path).unwrap().len(), len, "nothing cut");
    assert!(writer.read("7/1-1.lf").is_err());
    assert_eq!(writer.read("7/2-2.lf").unwrap(), b"sound");
}

/// A round of `n` link files of 1,000 bytes in group 7 of a writer, each
/// written twice, then those with an odd number removed: most of its
/// bytes dead. The names kept, with their bytes.
fn round_with_dead_bytes(links: &LinkPacks, n: usize) -> Vec<(String, Vec<u8>)> {
    let mut kept = Vec::new();
    for i in 0..n {
        let name = format!("7/{i}-{i}.lf");
        links.write(&name, &[b'a'; 1000]).unwrap();
        let bytes = vec![b'0' + (i % 10) as u8; 1000];
        links.write(&name, &bytes).unwrap();
        if i % 2 == 1 {
            links.remove(&name);
        } else {
            kept.push((name, bytes));
        }
    }
    kept
}

fn pack_bytes(dir: &Path) -> u64 {
    packs_of(dir).iter().map(|(_, len, _)| len).sum()
}

#[test]
fn a_round_mostly_dead_is_compacted_into_one_pack_that_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    let links = LinkPacks::writer(dir.path());
    let kept = round_with_dead_bytes(&links, 20);
    links.write("8/1-1.lf", b"another round").unwrap();
    drop(links);
    // A second opening: two packs.
    let links = LinkPacks::writer(dir.path());
    links.write("7/99-99.lf", b"late").unwrap();
    links.remove("7/99-99.lf");
    let names = links.names().unwrap();
    let before = pack_bytes(&round);
    assert_eq!(packs_of(&round).len(), 2);

    // A reader beside the writer, its index read before the compaction.
    let reader = LinkPacks::new(dir.path());
    assert_eq!(reader.read(&kept[0].0).unwrap(), kept[0].1);
    let c = links
        .compact("7", COMPACT_DEAD_SHARE)
        .unwrap()
        .expect("compacted");
    for (name, bytes) in &kept {
        assert_eq!(
            &reader.read(name).unwrap(),
            bytes,
            "read again by the reader"
        );
    }
    assert_eq!(c.before, before);
    assert_eq!(c.names, kept.len());
    let frame = (HEAD_BYTES + "0-0.lf".len() + 1000) as u64;
    assert!(c.after <= kept.len() as u64 * (frame + 2), "{c:?}");
    let packs = packs_of(&round);
    assert_eq!(packs.len(), 1, "{packs:?}");
    assert_eq!(pack_bytes(&round), c.after);
    assert!(packs.iter().all(|(_, len, whole)| len == whole));
    for (name, bytes) in &kept {
        assert_eq!(&links.read(name).unwrap(), bytes);
    }
    assert_eq!(links.names().unwrap(), names);
    assert_eq!(links.read("8/1-1.lf").unwrap(), b"another round");
    // Written to after: a pack after the compacted one; read again whole.
    links.write("7/100-100.lf", b"after").unwrap();
    drop(links);
    let again = LinkPacks::writer(dir.path());
    for (name, bytes) in &kept {
        assert_eq!(&again.read(name).unwrap(), bytes);
    }
    assert_eq!(again.read("7/100-100.lf").unwrap(), b"after");
    assert_eq!(
        again.read("7/1-1.lf").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    // Not dead enough (one removal in 11 names): nothing done.
    again.remove("7/100-100.lf");
    let packs = packs_of(&round);
    assert_eq!(again.compact("7", COMPACT_DEAD_SHARE).unwrap(), None);
    assert_eq!(packs_of(&round).len(), packs.len());
    // Readers never compact.
    assert!(LinkPacks::new(dir.path()).compact("7", 0.0).is_err());
}

/// A crash part way through a compaction leaves the new pack beside all
/// the old ones, or beside the newer old ones (the oldest are removed
/// first): either reads the same, and no removed name comes back.
#[test]
fn a_compaction_cut_short_by_a_crash_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    let links = LinkPacks::writer(dir.path());
    let kept = round_with_dead_bytes(&links, 6);
    drop(links);
    // The removals of the next opening land in a second pack.
    let links = LinkPacks::writer(dir.path());
    links.write("7/50-50.lf", b"x").unwrap();
    links.remove("7/0-0.lf");
    let kept: Vec<_> = kept.into_iter().filter(|(n, _)| n != "7/0-0.lf").collect();
    let old: Vec<(PathBuf, Vec<u8>)> = packs_of(&round)
        .into_iter()
        .map(|(p, _, _)| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    assert_eq!(old.len(), 2);
    links.compact("7", 0.0).unwrap().expect("compacted");
    drop(links);
    for restore in [&old[..], &old[1..]] {
        for (p, b) in restore {
            fs::write(p, b).unwrap();
        }
        let again = LinkPacks::writer(dir.path());
        for (name, bytes) in &kept {
            assert_eq!(&again.read(name).unwrap(), bytes, "{name}");
        }
        assert_eq!(again.read("7/50-50.lf").unwrap(), b"x");
        let names = again.names().unwrap();
        assert!(!names.contains(&"7/0-0.lf".to_string()), "{names:?}");
        assert!(!names.contains(&"7/1-1.lf".to_string()), "{names:?}");
        // Compacted again, it keeps the same names.
        again.compact("7", 0.0).unwrap().expect("compacted");
        assert_eq!(again.names().unwrap(), names);
        assert_eq!(packs_of(&round).len(), 1);
    }
}

/// A frame damaged on disk is copied with the checksum it was written
/// with: it still reads as damaged. A pack with bytes no head reads is not
/// compacted (they may hide frames that were synced).
#[test]
fn a_compaction_keeps_damage_visible_and_leaves_unread_bytes_alone() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    let links = LinkPacks::writer(dir.path());
    let kept = round_with_dead_bytes(&links, 4);
    let (path, _, _) = packs_of(&round).remove(0);
    let loc = lock(&links.group("7").state).index["0-0.lf"];
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.write_all_at(b"#", loc.offset + 10).unwrap();
    links.compact("7", 0.0).unwrap().expect("compacted");
    let e = links.read(&kept[0].0).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
    assert_eq!(links.read(&kept[1].0).unwrap(), kept[1].1);
    drop(links);
    // Garbage past the last whole frame: left as it is.
    let (path, len, _) = packs_of(&round).remove(0);
    let f = OpenOptions::new().append(true).open(&path).unwrap();
    (&f).write_all(&[0xee; 64]).unwrap();
    let links = LinkPacks::writer(dir.path());
    links.remove(&kept[1].0);
    assert_eq!(links.compact("7", 0.0).unwrap(), None);
    assert_eq!(fs::metadata(&path).unwrap().len(), len + 64);
}

/// Past MAX_COMPACTIONS running, a round that ends is closed without
/// one (the next start's check compacts it).
#[test]
fn rounds_ending_past_the_compactions_running_wait_for_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let links = LinkPacks::writer(dir.path());
    // Compactions that hold their group's lock until let go.
    let held: Vec<_> = (0..MAX_COMPACTIONS)
        .map(|i| {
            let g = links.group(&format!("{}", 100 + i));
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let h = std::thread::spawn(move || {
                let _st = lock(&g.state);
                let _ = rx.recv();
            });
            lock(&links.compacting).push(h);
            tx
        })
        .collect();
    let kept = round_with_dead_bytes(&links, 10);
    let before = pack_bytes(&dir.path().join("7"));
    links.forget_round(7);
    assert!(!lock(&links.groups).contains_key("7"), "closed at once");
    assert_eq!(pack_bytes(&dir.path().join("7")), before, "not compacted");
    drop(held);
    links.wait_compactions();
    links.compact_ended(7);
    assert!(pack_bytes(&dir.path().join("7")) < before / 2);
    assert_eq!(links.read(&kept[0].0).unwrap(), kept[0].1);
}

/// A round that ends is compacted in the background when it is dead
/// enough, and closed after.
#[test]
fn a_round_that_ends_is_compacted_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    let links = LinkPacks::writer(dir.path());
    let kept = round_with_dead_bytes(&links, 10);
    let before = pack_bytes(&round);
    links.forget_round(7);
    links.wait_compactions();
    assert!(pack_bytes(&round) < before / 2, "{before}");
    assert!(!lock(&links.groups).contains_key("7"), "closed after");
    for (name, bytes) in &kept {
        assert_eq!(&links.read(name).unwrap(), bytes);
    }
}

/// A round that ended before the server stopped, and was not compacted
/// then, is compacted by the check at the next start (`compact_ended`);
/// a reader's call does nothing.
#[test]
fn a_round_that_ended_before_a_restart_is_compacted_when_checked() {
    let dir = tempfile::tempdir().unwrap();
    let round = dir.path().join("7");
    let links = LinkPacks::writer(dir.path());
    let kept = round_with_dead_bytes(&links, 10);
    drop(links);
    let before = pack_bytes(&round);
    LinkPacks::new(dir.path()).compact_ended(7);
    assert_eq!(pack_bytes(&round), before);
    let links = LinkPacks::writer(dir.path());
    links.compact_ended(7);
    assert!(pack_bytes(&round) < before / 2, "{before}");
    assert_eq!(packs_of(&round).len(), 1);
    for (name, bytes) in &kept {
        assert_eq!(&links.read(name).unwrap(), bytes);
    }
}
