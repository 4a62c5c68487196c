//! Time windows: when the client may crawl. The rules live in
//! [`beebot_shared::window`] (the server's simulator plays them too); this
//! module re-exports them so the client's callers name them here.

pub use beebot_shared::window::*;
