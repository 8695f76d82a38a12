//! Test hosts in network namespaces: each broker in its own namespace with its own address on
//! one bridge, which the test process (the clients) reaches from the root namespace. Links
//! between hosts are cut and healed with blackhole routes inside the namespaces, so a host
//! can lose its peers while its clients still reach it. Needs root and iproute2; everything
//! is removed on drop.

use std::process::Command;

pub struct Net {
    tag: String,
    subnet: String,
    hosts: usize,
    /// (from, to) pairs whose packets are dropped.
    cut: Vec<(usize, usize)>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2's `ip` (the netns tests need it and root)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Net {
    /// `hosts` namespaces on one bridge. Names and the subnet come from this process's id,
    /// so two test processes never share them.
    pub fn create(hosts: usize) -> Net {
        let pid = std::process::id();
        let tag = format!("k{}", pid % 1_000_000);
        let subnet = format!("10.213.{}", pid % 250 + 1);
        let mut net = Net {
            tag,
            subnet,
            hosts: 0,
            cut: Vec::new(),
        };
        net.remove_leftovers();
        let br = net.bridge();
        ip(&["link", "add", &br, "type", "bridge"]);
        ip(&["addr", "add", &format!("{}.1/24", net.subnet), "dev", &br]);
        ip(&["link", "set", &br, "up"]);
        for i in 0..hosts {
            let ns = net.namespace_name(i);
            let veth = format!("{}v{i}", net.tag);
            ip(&["netns", "add", &ns]);
            net.hosts = i + 1;
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["link", "set", &veth, "master", &br]);
            ip(&["link", "set", &veth, "up"]);
            let addr = format!("{}/24", net.ip(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    fn namespace_name(&self, i: usize) -> String {
        format!("{}-h{i}", self.tag)
    }

    pub fn len(&self) -> usize {
        self.hosts
    }

    /// The namespace of host `i`.
    pub fn namespace(&self, i: usize) -> String {
        self.namespace_name(i)
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, 11 + i)
    }

    /// Drops every packet between host `i` and each host of `others`, both ways; the root
    /// namespace (the clients) still reaches all of them.
    pub fn cut(&mut self, i: usize, others: &[usize]) {
        for &j in others {
            for (from, to) in [(i, j), (j, i)] {
                let dst = format!("{}/32", self.ip(to));
                ip(&[
                    "-n",
                    &self.namespace_name(from),
                    "route",
                    "add",
                    "blackhole",
                    &dst,
                ]);
                self.cut.push((from, to));
            }
        }
    }

    /// Restores every cut link.
    pub fn heal(&mut self) {
        for (from, to) in std::mem::take(&mut self.cut) {
            let dst = format!("{}/32", self.ip(to));
            ip(&[
                "-n",
                &self.namespace_name(from),
                "route",
                "del",
                "blackhole",
                &dst,
            ]);
        }
    }

    /// Namespaces and bridges that an earlier test process, killed before its drop ran, left
    /// behind: those whose tag names a process that no longer runs (or this one's pid).
    fn remove_leftovers(&self) {
        let listed = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let links = Command::new("ip")
            .args(["-br", "link"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let stale = |tag: &str| {
            tag == self.tag
                || tag
                    .strip_prefix('k')
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        };
        for name in listed.split_whitespace().filter(|w| w.contains("-h")) {
            if name.split_once("-h").is_some_and(|(tag, _)| stale(tag)) {
                let _ = Command::new("ip").args(["netns", "del", name]).output();
            }
        }
        for link in links.lines().filter_map(|l| l.split_whitespace().next()) {
            if link.strip_suffix("br").is_some_and(stale) {
                let _ = Command::new("ip").args(["link", "del", link]).output();
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it the other end.
        for i in 0..self.hosts {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace_name(i)])
                .output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .output();
    }
}
