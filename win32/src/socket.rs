//! Whether a kept connection has news, asked without waiting (`WSAPoll`).

use std::io;
use std::net::TcpStream;
use std::os::windows::io::AsRawSocket;

use windows_sys::Win32::Networking::WinSock::{
    WSAGetLastError, WSAPoll, POLLRDNORM, SOCKET_ERROR, WSAPOLLFD,
};

/// Whether `stream` has bytes to read, was closed by its peer or failed:
/// one `WSAPoll` with a zero timeout (Windows reports a close and an
/// error in `revents` whatever was asked).
pub fn has_news(stream: &TcpStream) -> io::Result<bool> {
    let mut fd = WSAPOLLFD {
        fd: stream.as_raw_socket() as usize,
        events: POLLRDNORM,
        revents: 0,
    };
    // SAFETY: one WSAPOLLFD owned here, its count 1, for a socket `stream`
    // keeps open for the call; a zero timeout returns at once.
    let n = unsafe { WSAPoll(&mut fd, 1, 0) };
    if n == SOCKET_ERROR {
        // SAFETY: reads this thread's last Winsock error; no arguments.
        return Err(io::Error::from_raw_os_error(unsafe { WSAGetLastError() }));
    }
    Ok(n > 0 && fd.revents != 0)
}
