//! Process plumbing of the command lines: the async runtime and the shutdown
//! signal. One copy for the client and the server lives in
//! [`beebot_shared::rt`]; this module re-exports it.

pub use beebot_shared::rt::*;
