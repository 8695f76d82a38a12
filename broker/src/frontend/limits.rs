//! Kafka's connection limits, per broker (every shard together): `max.connections` and
//! `max.connections.per.ip`. A connection is admitted when it is accepted and counted until
//! it closes ([`Admission`] gives its place back when dropped). The counters are shared by the
//! shards (atomics, and a lock taken only on accept and close, never per request).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

static OPEN: AtomicUsize = AtomicUsize::new(0);
static PER_IP: Mutex<Option<HashMap<IpAddr, usize>>> = Mutex::new(None);

/// A connection's place under the limits, given back when dropped.
#[derive(Debug)]
pub struct Admission {
    ip: Option<IpAddr>,
    counted: bool,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.counted {
            OPEN.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(ip) = self.ip {
            let mut map = PER_IP.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(m) = map.as_mut() {
                if let Some(n) = m.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(&ip);
                    }
                }
            }
        }
    }
}

/// Admits a connection from `ip`, or says which limit it is over. `exempt`: the inter-broker
/// listener's connections do not count against `max.connections` (as Kafka keeps replication
/// going when clients fill the broker), but do against `max.connections.per.ip`.
pub fn admit(
    ip: Option<IpAddr>,
    max_connections: usize,
    max_per_ip: usize,
    exempt: bool,
) -> Result<Admission, String> {
    let mut admission = Admission {
        ip: None,
        counted: false,
    };
    if !exempt {
        let before = OPEN.fetch_add(1, Ordering::AcqRel);
        admission.counted = true;
        if before >= max_connections {
            return Err(format!(
                "{} connections open: max.connections is {max_connections}",
                before
            ));
        }
    }
    if let Some(ip) = ip {
        let mut map = PER_IP.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.get_or_insert_with(HashMap::new).entry(ip).or_insert(0);
        if *n >= max_per_ip {
            return Err(format!(
                "{n} connections open from {ip}: max.connections.per.ip is {max_per_ip}"
            ));
        }
        *n += 1;
        admission.ip = Some(ip);
    }
    Ok(admission)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test touches the process-wide counters (so the tests cannot race on them).
    #[test]
    fn limits_count_until_dropped() {
        let a: IpAddr = "10.9.9.1".parse().unwrap();
        let b: IpAddr = "10.9.9.2".parse().unwrap();
        let base = OPEN.load(Ordering::Acquire);
        let first = admit(Some(a), base + 3, 2, false).unwrap();
        let second = admit(Some(a), base + 3, 2, false).unwrap();
        let err = admit(Some(a), base + 3, 2, false).unwrap_err();
        assert!(err.contains("max.connections.per.ip is 2"), "{err}");
        let third = admit(Some(b), base + 3, 2, false).unwrap();
        let err = admit(Some(b), base + 3, 2, false).unwrap_err();
        assert!(err.contains("max.connections is"), "{err}");
        // The inter-broker listener is not held back by max.connections.
        let exempt = admit(Some(b), base + 3, 2, true).unwrap();
        drop(first);
        let again = admit(Some(a), base + 3, 2, false).unwrap();
        drop((second, third, exempt, again));
        assert_eq!(OPEN.load(Ordering::Acquire), base);
        assert!(PER_IP.lock().unwrap().as_ref().unwrap().get(&a).is_none());
    }
}
