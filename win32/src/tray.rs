//! A notification-area ("tray") icon with a menu, on a thread of its own
//! running the window messages it needs.
//!
//! The caller gives a [`Handler`]: what the icon looks like now ([`Look`]:
//! a colour, a tooltip, the menu's items), asked when the icon is made and
//! then every refresh; what to do when an item is chosen (from the menu a
//! right click opens, or the default item on a double click); and what to
//! do when the program is asked to end (the session ends, or another
//! program closes it). [`Tray`] ends the icon and its thread when dropped.
//!
//! The icon is drawn here (a disc of the look's colour), so the program
//! needs no resource file. A notification area that refuses the icon
//! (Explorer still starting at logon) is asked again at every refresh, and
//! when Explorer starts again the icon is added again (`TaskbarCreated`).

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use windows_sys::Win32::Foundation::{HWND, LPARAM, LRESULT, POINT, WPARAM};
use windows_sys::Win32::Graphics::Gdi::{CreateBitmap, DeleteObject};
use windows_sys::Win32::System::LibraryLoader::GetModuleHandleW;
use windows_sys::Win32::UI::Shell::{
    Shell_NotifyIconW, NIF_ICON, NIF_MESSAGE, NIF_TIP, NIM_ADD, NIM_DELETE, NIM_MODIFY,
    NOTIFYICONDATAW,
};
use windows_sys::Win32::UI::WindowsAndMessaging::{
    AppendMenuW, ChangeWindowMessageFilterEx, CreateIconIndirect, CreatePopupMenu, CreateWindowExW,
    DefWindowProcW, DestroyIcon, DestroyMenu, DestroyWindow, DispatchMessageW, GetCursorPos,
    GetMessageW, KillTimer, PostMessageW, PostQuitMessage, RegisterClassW, RegisterWindowMessageW,
    SetForegroundWindow, SetMenuDefaultItem, SetTimer, TrackPopupMenu, TranslateMessage, HICON,
    ICONINFO, MF_GRAYED, MF_SEPARATOR, MF_STRING, MSG, MSGFLT_ALLOW, TPM_BOTTOMALIGN, TPM_NONOTIFY,
    TPM_RETURNCMD, TPM_RIGHTBUTTON, WM_APP, WM_CLOSE, WM_COMMAND, WM_DESTROY, WM_ENDSESSION,
    WM_LBUTTONDBLCLK, WM_NULL, WM_QUERYENDSESSION, WM_RBUTTONUP, WM_TIMER, WNDCLASSW,
    WS_OVERLAPPED,
};

use crate::wide::wide;

/// The message the shell sends about the icon (mouse events in `lParam`).
const WM_TRAY: u32 = WM_APP + 1;
/// The message [`Tray::choose`] posts: an item chosen as the menu would.
const WM_CHOOSE: u32 = WM_APP + 2;
/// The message dropping a [`Tray`] posts: the icon goes, the program
/// stays (unlike `WM_CLOSE`, which another program sends to close it).
const WM_END_ICON: u32 = WM_APP + 3;
/// The icon's id within its window.
const ICON_ID: u32 = 1;
/// The refresh timer's id.
const TIMER_ID: usize = 1;
/// The icon's side, pixels (the notification area's small icon).
const ICON_PX: usize = 16;
/// Longest tooltip, UTF-16 units, its terminator included (`szTip`).
pub const MAX_TIP_UNITS: usize = 128;

/// One entry of the menu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A command: its id (never 0), its label, whether it can be chosen.
    Command {
        id: u16,
        label: String,
        enabled: bool,
    },
    /// A line between groups.
    Separator,
}

/// What the icon shows now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    /// The disc's colour, red, green, blue.
    pub colour: [u8; 3],
    /// The tooltip (cut to [`MAX_TIP_UNITS`]).
    pub tip: String,
    pub menu: Vec<Item>,
    /// The item a double click chooses (shown in bold).
    pub default: Option<u16>,
}

/// What the icon asks its owner. Runs on the icon's thread; a panic in it
/// is caught (and said on stderr) and the icon goes on.
pub trait Handler: Send + 'static {
    /// The look now.
    fn look(&mut self) -> Look;
    /// An item was chosen.
    fn chosen(&mut self, id: u16);
    /// The session ends (log off, shut down, restart: `WM_ENDSESSION`) or
    /// another program asks this one to close (`WM_CLOSE`, as `taskkill`
    /// without `/F` and the Restart Manager send): stop, returning once
    /// stopped or past a bound. A console program that shows windows hears
    /// of the session's end only here, never through its console handler.
    fn ending(&mut self);
}

/// A running icon; dropped, the icon goes and its thread ends.
pub struct Tray {
    /// The icon's window, as an address (a window handle is not `Send`).
    hwnd: usize,
    thread: Option<JoinHandle<()>>,
    /// Whether the notification area has the icon now.
    shown: Arc<AtomicBool>,
}

impl Tray {
    /// Make the icon's window and thread; the icon is refreshed every
    /// `refresh` (and added then, when the notification area refused it).
    pub fn start(handler: Box<dyn Handler>, refresh: Duration) -> io::Result<Tray> {
        let (tx, rx) = mpsc::channel();
        let shown = Arc::new(AtomicBool::new(false));
        let theirs = shown.clone();
        let thread = std::thread::Builder::new()
            .name("tray".into())
            .spawn(move || icon_thread(handler, refresh, theirs, tx))?;
        match rx.recv() {
            Ok(Ok(hwnd)) => Ok(Tray {
                hwnd,
                thread: Some(thread),
                shown,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other(
                    "the tray thread ended before its window was made",
                ))
            }
        }
    }

    /// Choose an item as the menu would (a keyboard shortcut, a test).
    pub fn choose(&self, id: u16) -> io::Result<()> {
        self.post(WM_CHOOSE, usize::from(id))
    }

    /// Ask the icon's window to close as another program would
    /// (`WM_CLOSE`): the handler's [`Handler::ending`] runs.
    pub fn close_as_another_program(&self) -> io::Result<()> {
        self.post(WM_CLOSE, 0)
    }

    /// Whether the icon's thread still runs.
    pub fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Whether the notification area shows the icon now.
    pub fn shown(&self) -> bool {
        self.running() && self.shown.load(Ordering::Relaxed)
    }

    /// Post to the icon's window while its thread runs (an ended thread's
    /// window handle may name another window by now).
    fn post(&self, msg: u32, wparam: usize) -> io::Result<()> {
        if !self.running() {
            return Err(io::Error::other("the icon's thread has ended"));
        }
        // SAFETY: posting only queues a message for a window this thread
        // made; a window gone makes the call fail, which is reported.
        let ok = unsafe { PostMessageW(self.hwnd as HWND, msg, wparam, 0) };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for Tray {
    fn drop(&mut self) {
        let _ = self.post(WM_END_ICON, 0);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The icon thread's own state, reached from its window procedure.
struct State {
    handler: Box<dyn Handler>,
    look: Option<Look>,
    icon: HICON,
    taskbar_created: u32,
    /// Whether the notification area has the icon.
    shown: Arc<AtomicBool>,
}

impl Drop for State {
    fn drop(&mut self) {
        if !self.icon.is_null() {
            // SAFETY: an icon made by `make_icon`, owned here and no longer
            // shown (its window is gone).
            unsafe { DestroyIcon(self.icon) };
        }
    }
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Run a call of the handler's; a panic in it is said, and the icon goes
/// on (it would otherwise cross the window procedure and abort the program).
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(_) => {
            eprintln!("the notification-area icon's handler panicked");
            None
        }
    }
}

/// Run `f` on the handler, if the state is there and not in use.
fn with_handler(f: impl FnOnce(&mut dyn Handler)) {
    STATE.with(|s| {
        if let Ok(mut guard) = s.try_borrow_mut() {
            if let Some(state) = guard.as_mut() {
                guarded(|| f(state.handler.as_mut()));
            }
        }
    });
}

fn icon_thread(
    handler: Box<dyn Handler>,
    refresh: Duration,
    shown: Arc<AtomicBool>,
    made: mpsc::Sender<io::Result<usize>>,
) {
    let class = wide("BeeBotTrayWindow");
    // SAFETY: no arguments: this program's module handle.
    let instance = unsafe { GetModuleHandleW(std::ptr::null()) };
    let wc = WNDCLASSW {
        lpfnWndProc: Some(window_proc),
        hInstance: instance,
        lpszClassName: class.as_ptr(),
        ..Default::default()
    };
    // SAFETY: `wc` and the class name it points to live through the call; a
    // class registered before (a second icon in one process) fails here and
    // is still usable below.
    unsafe { RegisterClassW(&wc) };
    let title = wide("BeeBot");
    let name = wide("TaskbarCreated");
    // SAFETY: a NUL-terminated string owned here.
    let taskbar_created = unsafe { RegisterWindowMessageW(name.as_ptr()) };
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            handler,
            look: None,
            icon: std::ptr::null_mut(),
            taskbar_created,
            shown,
        })
    });
    // SAFETY: the class and title strings live through the call; a hidden
    // top-level window (not message-only: those miss `TaskbarCreated` and
    // the session's end).
    let hwnd = unsafe {
        CreateWindowExW(
            0,
            class.as_ptr(),
            title.as_ptr(),
            WS_OVERLAPPED,
            0,
            0,
            0,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            instance,
            std::ptr::null(),
        )
    };
    if hwnd.is_null() {
        let _ = made.send(Err(io::Error::last_os_error()));
        STATE.with(|s| drop(s.borrow_mut().take()));
        return;
    }
    // SAFETY: this thread's own window and a message number, no struct:
    // an elevated program would not hear Explorer start again otherwise.
    unsafe {
        ChangeWindowMessageFilterEx(hwnd, taskbar_created, MSGFLT_ALLOW, std::ptr::null_mut())
    };
    // Refused now (Explorer still starting), the timer asks again.
    let _ = refresh_icon(hwnd, true);
    let ms = u32::try_from(refresh.as_millis())
        .unwrap_or(u32::MAX)
        .max(100);
    // SAFETY: a timer on this thread's own window, no callback (WM_TIMER).
    unsafe { SetTimer(hwnd, TIMER_ID, ms, None) };
    let _ = made.send(Ok(hwnd as usize));
    let mut msg = MSG::default();
    // SAFETY: `msg` is owned here; the loop ends on WM_QUIT (0) or an
    // error (-1).
    while unsafe { GetMessageW(&mut msg, std::ptr::null_mut(), 0, 0) } > 0 {
        // SAFETY: a message just received into `msg`.
        unsafe {
            TranslateMessage(&msg);
            DispatchMessageW(&msg);
        }
    }
    // The icon goes with the state.
    STATE.with(|s| drop(s.borrow_mut().take()));
}

/// Ask the handler for the look and show it: add the icon when `add`
/// (Explorer started again) or when the notification area does not have
/// it yet, else change it where it changed.
fn refresh_icon(hwnd: HWND, add: bool) -> io::Result<()> {
    type Shown = Option<(NOTIFYICONDATAW, HICON, bool)>;
    let shown = STATE.with(|s| -> io::Result<Shown> {
        let Ok(mut guard) = s.try_borrow_mut() else {
            return Ok(None);
        };
        let Some(state) = guard.as_mut() else {
            return Ok(None);
        };
        let add = add || !state.shown.load(Ordering::Relaxed);
        let Some(look) = guarded(|| state.handler.look()) else {
            return Ok(None);
        };
        if !add && state.look.as_ref() == Some(&look) {
            return Ok(None);
        }
        let colour_changed = state.look.as_ref().map(|l| l.colour) != Some(look.colour);
        let mut old = std::ptr::null_mut();
        if colour_changed || state.icon.is_null() {
            let icon = make_icon(look.colour)?;
            old = std::mem::replace(&mut state.icon, icon);
        }
        let mut data = NOTIFYICONDATAW {
            cbSize: std::mem::size_of::<NOTIFYICONDATAW>() as u32,
            hWnd: hwnd,
            uID: ICON_ID,
            uFlags: NIF_MESSAGE | NIF_ICON | NIF_TIP,
            uCallbackMessage: WM_TRAY,
            hIcon: state.icon,
            ..Default::default()
        };
        let tip = tip_units(&look.tip);
        data.szTip[..tip.len()].copy_from_slice(&tip);
        state.look = Some(look);
        Ok(Some((data, old, add)))
    })?;
    let Some((data, old, add)) = shown else {
        return Ok(());
    };
    // SAFETY: `data` is a whole NOTIFYICONDATAW owned here, naming this
    // thread's window and an icon its state owns.
    let mut ok = unsafe { Shell_NotifyIconW(if add { NIM_ADD } else { NIM_MODIFY }, &data) };
    if ok == 0 && add {
        // Kept by a shell that said `TaskbarCreated` all the same.
        // SAFETY: as above.
        ok = unsafe { Shell_NotifyIconW(NIM_MODIFY, &data) };
    }
    if !old.is_null() {
        // SAFETY: the icon shown before, replaced by the call above.
        unsafe { DestroyIcon(old) };
    }
    STATE.with(|s| {
        if let Ok(g) = s.try_borrow() {
            if let Some(state) = g.as_ref() {
                state.shown.store(ok != 0, Ordering::Relaxed);
            }
        }
    });
    if ok == 0 {
        return Err(io::Error::other(
            "the notification area refused the icon (no shell running?)",
        ));
    }
    Ok(())
}

/// A tooltip as UTF-16 that fits `szTip` with its terminator, cut at a
/// character (never inside a surrogate pair).
pub fn tip_units(tip: &str) -> Vec<u16> {
    let mut units = Vec::with_capacity(MAX_TIP_UNITS);
    for c in tip.chars() {
        let mut buf = [0u16; 2];
        let enc = c.encode_utf16(&mut buf);
        if units.len() + enc.len() > MAX_TIP_UNITS - 1 {
            break;
        }
        units.extend_from_slice(enc);
    }
    units
}

/// The icon's pixels: a disc of `colour` with a darker rim on transparent,
/// as BGRA rows, top first, with straight (not premultiplied) alpha, as an
/// icon's colour bitmap holds them.
pub fn disc_pixels(colour: [u8; 3]) -> Vec<u8> {
    let mut px = Vec::with_capacity(ICON_PX * ICON_PX * 4);
    let c = (ICON_PX as f32 - 1.0) / 2.0;
    let r = ICON_PX as f32 / 2.0 - 0.5;
    for y in 0..ICON_PX {
        for x in 0..ICON_PX {
            let d = ((x as f32 - c).powi(2) + (y as f32 - c).powi(2)).sqrt();
            let alpha = (r + 0.5 - d).clamp(0.0, 1.0);
            let rim = if d > r - 2.0 { 0.6 } else { 1.0 };
            let ch = |v: u8| (f32::from(v) * rim).round() as u8;
            px.extend_from_slice(&[
                ch(colour[2]),
                ch(colour[1]),
                ch(colour[0]),
                (alpha * 255.0).round() as u8,
            ]);
        }
    }
    px
}

fn make_icon(colour: [u8; 3]) -> io::Result<HICON> {
    let pixels = disc_pixels(colour);
    // The mask is all zero bits: the colour bitmap's alpha decides.
    let mask = vec![0u8; ICON_PX * ICON_PX / 8];
    let side = ICON_PX as i32;
    // SAFETY: `pixels` holds side*side 32-bit pixels and `mask` side*side
    // bits in 16-bit-aligned rows (2 bytes a row of 16), as CreateBitmap
    // reads them; both outlive the calls.
    let (colour_bm, mask_bm) = unsafe {
        (
            CreateBitmap(side, side, 1, 32, pixels.as_ptr().cast()),
            CreateBitmap(side, side, 1, 1, mask.as_ptr().cast()),
        )
    };
    let info = ICONINFO {
        fIcon: 1,
        xHotspot: 0,
        yHotspot: 0,
        hbmMask: mask_bm,
        hbmColor: colour_bm,
    };
    // SAFETY: `info` names the two bitmaps made above (or null ones, which
    // the call refuses); the icon copies them, so they are freed after.
    let icon = unsafe { CreateIconIndirect(&info) };
    // SAFETY: bitmaps made above and owned here; deleting null is harmless.
    unsafe {
        DeleteObject(colour_bm);
        DeleteObject(mask_bm);
    }
    if icon.is_null() {
        Err(io::Error::last_os_error())
    } else {
        Ok(icon)
    }
}

/// Show the menu at the cursor and return the item chosen (0: none).
fn show_menu(hwnd: HWND) -> u16 {
    let Some(look) = STATE.with(|s| {
        s.try_borrow()
            .ok()
            .and_then(|g| g.as_ref().and_then(|st| st.look.clone()))
    }) else {
        return 0;
    };
    // SAFETY: no arguments; a new empty menu, destroyed below.
    let menu = unsafe { CreatePopupMenu() };
    if menu.is_null() {
        return 0;
    }
    for item in &look.menu {
        match item {
            Item::Command { id, label, enabled } => {
                let text = wide(label);
                let flags = if *enabled {
                    MF_STRING
                } else {
                    MF_STRING | MF_GRAYED
                };
                // SAFETY: the menu made above and a NUL-terminated label
                // that lives through the call (the menu copies it).
                unsafe { AppendMenuW(menu, flags, usize::from(*id), text.as_ptr()) };
            }
            Item::Separator => {
                // SAFETY: the menu made above; a separator has no text.
                unsafe { AppendMenuW(menu, MF_SEPARATOR, 0, std::ptr::null()) };
            }
        }
    }
    if let Some(id) = look.default {
        // SAFETY: the menu made above; an item by its id.
        unsafe { SetMenuDefaultItem(menu, u32::from(id), 0) };
    }
    let mut at = POINT { x: 0, y: 0 };
    // SAFETY: `at` is owned here and only written. The window is brought to
    // the front first, or the menu would not close when clicked away from;
    // the WM_NULL after is the documented companion of that.
    let chosen = unsafe {
        GetCursorPos(&mut at);
        SetForegroundWindow(hwnd);
        let chosen = TrackPopupMenu(
            menu,
            TPM_RETURNCMD | TPM_NONOTIFY | TPM_RIGHTBUTTON | TPM_BOTTOMALIGN,
            at.x,
            at.y,
            0,
            hwnd,
            std::ptr::null(),
        );
        PostMessageW(hwnd, WM_NULL, 0, 0);
        DestroyMenu(menu);
        chosen
    };
    u16::try_from(chosen).unwrap_or(0)
}

/// Give an item to the handler, then show what changed.
fn choose(hwnd: HWND, id: u16) {
    if id == 0 {
        return;
    }
    with_handler(|h| h.chosen(id));
    let _ = refresh_icon(hwnd, false);
}

extern "system" fn window_proc(hwnd: HWND, msg: u32, wparam: WPARAM, lparam: LPARAM) -> LRESULT {
    match msg {
        WM_TRAY => {
            // A right click opens the menu, a double click chooses the
            // default item; a single left click does nothing, so a double
            // click never meets an open menu.
            match (lparam as u32) & 0xFFFF {
                WM_RBUTTONUP => {
                    let id = show_menu(hwnd);
                    choose(hwnd, id);
                }
                WM_LBUTTONDBLCLK => {
                    let default = STATE.with(|s| {
                        s.try_borrow()
                            .ok()
                            .and_then(|g| g.as_ref().and_then(|st| st.look.as_ref()?.default))
                    });
                    choose(hwnd, default.unwrap_or(0));
                }
                _ => {}
            }
            0
        }
        WM_CHOOSE | WM_COMMAND => {
            choose(hwnd, (wparam & 0xFFFF) as u16);
            0
        }
        WM_TIMER => {
            let _ = refresh_icon(hwnd, false);
            0
        }
        // The session may end.
        WM_QUERYENDSESSION => 1,
        WM_ENDSESSION => {
            // It ends once this returns: stop first.
            if wparam != 0 {
                with_handler(|h| h.ending());
            }
            0
        }
        WM_CLOSE => {
            // Another program asks this one to close: stop it; the icon
            // goes when the program drops it.
            with_handler(|h| h.ending());
            0
        }
        WM_END_ICON => {
            // SAFETY: this thread's own window.
            unsafe { DestroyWindow(hwnd) };
            0
        }
        WM_DESTROY => {
            let data = NOTIFYICONDATAW {
                cbSize: std::mem::size_of::<NOTIFYICONDATAW>() as u32,
                hWnd: hwnd,
                uID: ICON_ID,
                ..Default::default()
            };
            // SAFETY: removes this window's icon (if shown) and its timer,
            // then ends this thread's message loop.
            unsafe {
                Shell_NotifyIconW(NIM_DELETE, &data);
                KillTimer(hwnd, TIMER_ID);
                PostQuitMessage(0);
            }
            0
        }
        m if m != 0
            && STATE.with(|s| {
                s.try_borrow()
                    .ok()
                    .and_then(|g| g.as_ref().map(|st| st.taskbar_created))
            }) == Some(m) =>
        {
            // Explorer started again: the icon is gone from its area.
            let _ = refresh_icon(hwnd, true);
            0
        }
        // SAFETY: every other message to the default procedure, as given.
        _ => unsafe { DefWindowProcW(hwnd, msg, wparam, lparam) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    #[test]
    fn the_disc_is_opaque_inside_and_clear_at_the_corners() {
        let px = disc_pixels([255, 0, 0]);
        assert_eq!(px.len(), ICON_PX * ICON_PX * 4);
        let at = |x: usize, y: usize| &px[(y * ICON_PX + x) * 4..][..4];
        assert_eq!(at(0, 0)[3], 0, "corner transparent");
        assert_eq!(at(8, 8), &[0, 0, 255, 255], "centre red, opaque (BGRA)");
        assert!(at(8, 0)[3] > 0 && at(8, 0)[2] < 255, "rim darker");
        // Straight alpha: an edge pixel keeps its colour, its alpha falls.
        let edge = (0..ICON_PX)
            .map(|x| at(x, 8))
            .find(|p| p[3] > 0 && p[3] < 255)
            .expect("an edge pixel");
        assert_eq!(edge[2], (255.0f32 * 0.6).round() as u8, "{edge:?}");
    }

    #[test]
    fn a_tip_is_cut_at_a_character_to_fit() {
        assert_eq!(
            tip_units("BeeBot"),
            "BeeBot".encode_utf16().collect::<Vec<_>>()
        );
        // 126 units and a character of two: it would not fit whole.
        let long = format!("{}😀", "a".repeat(MAX_TIP_UNITS - 2));
        let units = tip_units(&long);
        assert_eq!(units.len(), MAX_TIP_UNITS - 2);
        assert!(String::from_utf16(&units).is_ok());
    }

    #[derive(Default)]
    struct Seen {
        chosen: Vec<u16>,
        looks: u32,
        endings: u32,
    }

    struct Recorder(Arc<Mutex<Seen>>);

    impl Handler for Recorder {
        fn look(&mut self) -> Look {
            self.0.lock().unwrap().looks += 1;
            Look {
                colour: [0, 160, 0],
                tip: "BeeBot: crawling".into(),
                menu: vec![
                    Item::Command {
                        id: 1,
                        label: "Open".into(),
                        enabled: true,
                    },
                    Item::Separator,
                ],
                default: Some(1),
            }
        }
        fn chosen(&mut self, id: u16) {
            if id == 9 {
                panic!("a handler's panic stays in the icon");
            }
            self.0.lock().unwrap().chosen.push(id);
        }
        fn ending(&mut self) {
            self.0.lock().unwrap().endings += 1;
        }
    }

    fn until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// On Windows, and under Wine with a display (as the harness runs it),
    /// the icon is shown, refreshed, chosen from (a handler's panic caught),
    /// told another program closes it, and removed. Wine without a display
    /// has no window at all: making it fails with an error, never a hang.
    #[test]
    fn an_icon_is_shown_chosen_from_closed_and_ended() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let tray = match Tray::start(Box::new(Recorder(seen.clone())), Duration::from_millis(100)) {
            Ok(t) => t,
            Err(e) => {
                assert!(
                    crate::under_wine() && std::env::var_os("DISPLAY").is_none(),
                    "no icon window: {e}"
                );
                return;
            }
        };
        until("the icon shown", || tray.shown());
        tray.choose(1).unwrap();
        tray.choose(9).unwrap();
        tray.choose(7).unwrap();
        until("two items taken", || seen.lock().unwrap().chosen.len() >= 2);
        assert_eq!(seen.lock().unwrap().chosen, vec![1, 7]);
        assert!(tray.running(), "a handler's panic ended the icon");
        until("refreshed by its timer", || seen.lock().unwrap().looks >= 3);
        tray.close_as_another_program().unwrap();
        until("told to end", || seen.lock().unwrap().endings == 1);
        assert!(tray.running(), "a close asks the program; the icon stays");
        drop(tray);
    }
}
