//! Admission and budgets: unauthenticated connections counted per source
//! (an IPv4 address or an IPv6 /64), connections per host, and the bytes of
//! requests held in memory per owner and in all.
//!
//! Invariants: a slot or budget is released when its last holder drops it;
//! one source can never hold more than [`MAX_UNAUTHENTICATED_PER_ADDRESS`]
//! unauthenticated connections. It never reads or answers a request.

use std::collections::HashMap;
use std::net::IpAddr;
use std::net::Ipv6Addr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};

use tokio::sync::Semaphore;

use super::{
    CLOSE_LIMIT, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_HOST, MAX_HOST_INFLIGHT_REQUEST_BYTES,
    MAX_INFLIGHT_REQUEST_BYTES, MAX_UNAUTHENTICATED_INFLIGHT_BYTES,
    MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE, MAX_UNAUTHENTICATED_PER_ADDRESS,
};

/// The source a connection is counted against before it authenticates: an
/// IPv4 address, or an IPv6 /64 (one subscriber's prefix: a host given a /64
/// may use any of its 2^64 addresses, so counting addresses counts nothing).
pub(super) fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Whose in-flight budget a request is charged to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum BudgetOwner {
    /// An unauthenticated connection's source ([`source_key`]).
    Source(IpAddr),
    /// An authenticated host, over all its connections.
    Host(u64),
}

/// Limits shared by every connection.
pub(super) struct Limits {
    /// Unauthenticated connections per source ([`source_key`]).
    pub(super) unauthenticated: std::sync::Mutex<HashMap<IpAddr, u32>>,
    /// Live authenticated connections per host, oldest first.
    pub(super) hosts: std::sync::Mutex<HashMap<u64, Vec<quinn::Connection>>>,
    /// Bytes of request frames in memory, authenticated connections.
    pub(super) inflight_bytes: Arc<Semaphore>,
    /// Bytes of request frames in memory, unauthenticated connections.
    pub(super) unauthenticated_bytes: Arc<Semaphore>,
    /// Each host's and source's own in-flight budget; an entry lives while a
    /// connection or a request holds it.
    pub(super) budgets: std::sync::Mutex<HashMap<BudgetOwner, Weak<Semaphore>>>,
    /// Handshakes from unvalidated addresses in progress.
    pub(super) unvalidated_handshakes: Arc<AtomicUsize>,
}

impl Limits {
    pub(super) fn new() -> Limits {
        Limits {
            unauthenticated: std::sync::Mutex::new(HashMap::new()),
            hosts: std::sync::Mutex::new(HashMap::new()),
            inflight_bytes: Arc::new(Semaphore::new(MAX_INFLIGHT_REQUEST_BYTES)),
            unauthenticated_bytes: Arc::new(Semaphore::new(MAX_UNAUTHENTICATED_INFLIGHT_BYTES)),
            budgets: std::sync::Mutex::new(HashMap::new()),
            unvalidated_handshakes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// `owner`'s own in-flight budget (made on first use).
    pub(super) fn budget(&self, owner: BudgetOwner) -> Arc<Semaphore> {
        let mut m = self.budgets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = m.get(&owner).and_then(Weak::upgrade) {
            return b;
        }
        // Entries of owners gone: dropped once they could outnumber the
        // connections that may hold one.
        if m.len() >= MAX_CONNECTIONS {
            m.retain(|_, b| b.strong_count() > 0);
        }
        let bytes = match owner {
            BudgetOwner::Source(_) => MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE,
            BudgetOwner::Host(_) => MAX_HOST_INFLIGHT_REQUEST_BYTES,
        };
        let b = Arc::new(Semaphore::new(bytes));
        m.insert(owner, Arc::downgrade(&b));
        b
    }

    /// Count a new unauthenticated connection from `ip`'s source, or refuse it.
    pub(super) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<UnauthenticatedSlot> {
        let ip = source_key(ip);
        let mut m = self
            .unauthenticated
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_UNAUTHENTICATED_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(UnauthenticatedSlot {
            limits: self.clone(),
            ip,
        })
    }

    /// Note an authenticated connection of `host_id`; close its oldest ones
    /// beyond [`MAX_CONNECTIONS_PER_HOST`].
    pub(super) fn register_host(&self, host_id: u64, conn: &quinn::Connection) {
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let conns = m.entry(host_id).or_default();
        conns.retain(|c| c.close_reason().is_none() && c.stable_id() != conn.stable_id());
        conns.push(conn.clone());
        while conns.len() > MAX_CONNECTIONS_PER_HOST {
            let old = conns.remove(0);
            old.close(
                CLOSE_LIMIT.into(),
                b"too many connections from this host; closing the oldest",
            );
        }
    }

    pub(super) fn unregister_host(&self, host_id: u64, conn: &quinn::Connection) {
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conns) = m.get_mut(&host_id) {
            conns.retain(|c| c.stable_id() != conn.stable_id());
            if conns.is_empty() {
                m.remove(&host_id);
            }
        }
    }
}

/// One unauthenticated connection counted against its source; released on
/// drop (authentication or close).
pub(super) struct UnauthenticatedSlot {
    pub(super) limits: Arc<Limits>,
    pub(super) ip: IpAddr,
}

impl Drop for UnauthenticatedSlot {
    fn drop(&mut self) {
        let mut m = self
            .limits
            .unauthenticated
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}
