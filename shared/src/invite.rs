//! invite
