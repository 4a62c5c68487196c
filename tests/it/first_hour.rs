//! The newcomer's first hour, through the real binaries: each step of the
//! guides (docs/admin.md, docs/employee.md) that once misled an admin or an
//! employee, as a test that reproduces it.
//!
//! - `basics`: work that was lost (attempts past the limit);
//! - `admin`: the server's commands (durations, lists, names, waits, logs);
//! - `employee`: the client's commands (join, leave, settings, status);
//! - `work`: what the grid does with work (failed sites, cancel, wake-up).

mod admin;
mod basics;
mod employee;
mod work;
