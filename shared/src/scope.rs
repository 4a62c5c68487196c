//! Site scope rules (stub: to be written).
use serde::{Deserialize, Serialize};

/// Which hosts belong to a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Scope {
    /// Only the site's own host.
    #[default]
    Host,
    /// The host and all its subdomains.
    Subdomains,
    /// The whole registrable domain (Public Suffix List).
    Domain,
}
