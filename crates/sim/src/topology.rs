//! Topologies and routes.
//!
//! Nodes `0..hosts` are hosts (one port each, to a switch), the rest switches. Every link is two
//! ports that name each other. Routes are precomputed once (htsim's lesson: no per-packet path
//! search): for every switch and destination, the ports on a shortest path — several of them
//! where paths are equal-cost, and ECMP picks one by the flow's 5-tuple hash.
//!
//! Routes are kept per *edge switch* (the switch a host hangs off), not per host: a host has
//! one link, so every switch but its own reaches it exactly as it reaches that switch. In a
//! k = 16 fat-tree this makes the table 8× smaller (80 KB instead of 655 KB), small enough to
//! stay in cache while a simulation forwards a packet per event (docs/BENCHMARKS.md).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use irn_transport::Dur;

use crate::config::{TopologyConfig, TopologyKind};

/// One end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The node at the other end.
    pub peer: u32,
    /// Its port number there.
    pub peer_port: u16,
    /// Link rate in bits per second.
    pub rate_bps: u64,
    /// One-way propagation delay.
    pub delay: Dur,
    /// Picoseconds per byte when the rate divides 8 × 10¹² bit·ps/s exactly (10, 25, 40, 100,
    /// 400 Gb/s all do); 0 otherwise.
    ps_per_byte: u64,
}

impl Port {
    /// A port towards `peer`'s port `peer_port` over a link of `rate_bps` and `delay`.
    pub fn new(peer: u32, peer_port: u16, rate_bps: u64, delay: Dur) -> Port {
        const PS_BITS: u64 = 8_000_000_000_000;
        let ps_per_byte = match rate_bps {
            0 => 0,
            r if PS_BITS % r == 0 => PS_BITS / r,
            _ => 0,
        };
        Port {
            peer,
            peer_port,
            rate_bps,
            delay,
            ps_per_byte,
        }
    }

    /// The time to serialize `bytes` onto this link: exactly [`Dur::transmission`], by one
    /// multiplication instead of a division when the rate allows (a hop's hot path).
    #[inline]
    pub fn transmission(&self, bytes: u64) -> Dur {
        match bytes.checked_mul(self.ps_per_byte) {
            Some(ps) if self.ps_per_byte != 0 => Dur::from_picos(ps),
            _ => Dur::transmission(bytes, self.rate_bps),
        }
    }
}

/// A node: a host or a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Ports in order.
    pub ports: Vec<Port>,
    /// 0 for hosts; 1 for edge/leaf switches, 2 for aggregation/spine, 3 for core.
    pub tier: u8,
}

/// A network and its routes.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Hosts first, then switches.
    pub nodes: Vec<Node>,
    /// Number of hosts.
    pub hosts: u32,
    /// Per host: its edge switch's number among the edge switches (its *group*).
    group: Vec<u32>,
    /// Per host: the port of its edge switch that leads to it.
    down_port: Vec<u16>,
    /// Per group: its edge switch.
    group_switch: Vec<u32>,
    /// `route_set[(node - hosts) * groups + group]`: which of `sets` holds the equal-cost
    /// next-hop ports from switch `node` towards the group's edge switch. Port lists repeat (in
    /// a fat-tree every switch has its `k/2` single down ports and one up-set), so they are
    /// stored once and this table is two bytes an entry.
    route_set: Vec<u16>,
    /// `(start, len)` of each distinct port list in `route_ports`.
    sets: Vec<(u32, u16)>,
    route_ports: Vec<u16>,
    /// Links between the edge switches of every pair of groups, for ideal FCTs.
    group_dist: Vec<u16>,
    /// Names given in a topology file (`name NODE LABEL`), by node.
    names: BTreeMap<u32, String>,
    /// Static routes of a topology file, applied over the shortest-path sets:
    /// (switch, destination edge switch, ports, line).
    pinned: Vec<(u32, u32, Vec<u16>, usize)>,
    /// The file, for errors in `pinned`.
    path: String,
}

/// Why a topology could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The topology file could not be read.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        err: std::io::Error,
    },
    /// A line of the topology file is wrong.
    #[error("{path}:{line}: {msg}")]
    Parse {
        /// The file.
        path: String,
        /// Line number (1-based).
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// Some host cannot reach another.
    #[error("host {0} cannot reach host {1}")]
    Disconnected(u32, u32),
    /// More than 65 536 distinct next-hop port lists (a switch with thousands of ports).
    #[error("more than 65536 distinct equal-cost next-hop sets")]
    TooManyRouteSets,
}

struct Builder {
    nodes: Vec<Node>,
    rates: Vec<u64>,
    delays: Vec<Dur>,
}

impl Builder {
    fn new(cfg: &TopologyConfig, tiers: usize) -> Builder {
        let rates = (0..tiers.max(1))
            .map(|t| (cfg.link_gbps.tier(t) * 1e9).round() as u64)
            .collect();
        let delays = (0..tiers.max(1))
            .map(|t| Dur::from_picos((cfg.link_delay_ns.tier(t) * 1000.0).round() as u64))
            .collect();
        Builder {
            nodes: Vec::new(),
            rates,
            delays,
        }
    }

    fn add(&mut self, tier: u8) -> u32 {
        self.nodes.push(Node {
            ports: Vec::new(),
            tier,
        });
        (self.nodes.len() - 1) as u32
    }

    fn link(&mut self, a: u32, b: u32, tier: usize) {
        let (rate, delay) = (
            self.rates[tier.min(self.rates.len() - 1)],
            self.delays[tier.min(self.delays.len() - 1)],
        );
        self.link_with(a, b, rate, delay);
    }

    fn link_with(&mut self, a: u32, b: u32, rate_bps: u64, delay: Dur) {
        let pa = self.nodes[a as usize].ports.len() as u16;
        let pb = self.nodes[b as usize].ports.len() as u16;
        self.nodes[a as usize]
            .ports
            .push(Port::new(b, pb, rate_bps, delay));
        self.nodes[b as usize]
            .ports
            .push(Port::new(a, pa, rate_bps, delay));
    }
}

impl Topology {
    /// Builds the configured topology; `base_dir` resolves a topology file's path.
    pub fn build(cfg: &TopologyConfig, base_dir: &Path) -> Result<Topology, TopologyError> {
        match cfg.kind {
            TopologyKind::FatTree => Ok(Self::fat_tree(cfg)),
            TopologyKind::LeafSpine => Ok(Self::leaf_spine(cfg)),
            TopologyKind::Dumbbell => Ok(Self::dumbbell(cfg)),
            TopologyKind::File => {
                let p = cfg.file.as_deref().unwrap_or(Path::new(""));
                let p = if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    base_dir.join(p)
                };
                let text = std::fs::read_to_string(&p).map_err(|err| TopologyError::Io {
                    path: p.display().to_string(),
                    err,
                })?;
                Self::parse(&text, &p.display().to_string())
            }
        }
        .and_then(Topology::finish)
    }

    /// A k-ary fat-tree: hosts, then per pod its edge and aggregation switches, then the core.
    fn fat_tree(cfg: &TopologyConfig) -> Topology {
        let k = cfg.k;
        let half = k / 2;
        let mut b = Builder::new(cfg, 3);
        let hosts: Vec<u32> = (0..k * k * k / 4).map(|_| b.add(0)).collect();
        let mut edges = Vec::new();
        let mut aggs = Vec::new();
        for _pod in 0..k {
            edges.push((0..half).map(|_| b.add(1)).collect::<Vec<_>>());
            aggs.push((0..half).map(|_| b.add(2)).collect::<Vec<_>>());
        }
        let cores: Vec<u32> = (0..half * half).map(|_| b.add(3)).collect();
        for pod in 0..k as usize {
            for (e, &edge) in edges[pod].iter().enumerate() {
                for h in 0..half {
                    let host = hosts[(pod as u32 * half * half + e as u32 * half + h) as usize];
                    b.link(host, edge, 0);
                }
                for &agg in &aggs[pod] {
                    b.link(edge, agg, 1);
                }
            }
            for (a, &agg) in aggs[pod].iter().enumerate() {
                for c in 0..half {
                    b.link(agg, cores[(a as u32 * half + c) as usize], 2);
                }
            }
        }
        Topology::raw(b, hosts.len() as u32)
    }

    fn leaf_spine(cfg: &TopologyConfig) -> Topology {
        let mut b = Builder::new(cfg, 2);
        let n = cfg.leaves * cfg.hosts_per_leaf;
        let hosts: Vec<u32> = (0..n).map(|_| b.add(0)).collect();
        let leaves: Vec<u32> = (0..cfg.leaves).map(|_| b.add(1)).collect();
        let spines: Vec<u32> = (0..cfg.spines).map(|_| b.add(2)).collect();
        for (i, &h) in hosts.iter().enumerate() {
            b.link(h, leaves[i / cfg.hosts_per_leaf as usize], 0);
        }
        for &l in &leaves {
            for &s in &spines {
                b.link(l, s, 1);
            }
        }
        Topology::raw(b, n)
    }

    fn dumbbell(cfg: &TopologyConfig) -> Topology {
        let mut b = Builder::new(cfg, 2);
        let n = cfg.hosts_per_side * 2;
        let hosts: Vec<u32> = (0..n).map(|_| b.add(0)).collect();
        let left = b.add(1);
        let right = b.add(1);
        for (i, &h) in hosts.iter().enumerate() {
            b.link(
                h,
                if (i as u32) < cfg.hosts_per_side {
                    left
                } else {
                    right
                },
                0,
            );
        }
        b.link(left, right, 1);
        Topology::raw(b, n)
    }

    /// The topology file format: `#` comments; `hosts N`; `switches N` (numbered after the
    /// hosts); `link A B GBPS DELAY_NS` (A, B node numbers); `name NODE LABEL` (reports name
    /// the node LABEL, and later lines may use LABEL for NODE); `route SWITCH EDGE PORT…` (a
    /// static route: at SWITCH, packets for the hosts of edge switch EDGE take only these of
    /// its equal-cost ports — as an operator pins a path). Hosts have exactly one link; a
    /// port's number is its link's order among the node's links.
    fn parse(text: &str, path: &str) -> Result<Topology, TopologyError> {
        let err = |line: usize, msg: String| TopologyError::Parse {
            path: path.to_string(),
            line,
            msg,
        };
        let mut hosts: Option<u32> = None;
        let mut names: BTreeMap<u32, String> = BTreeMap::new();
        let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
        let mut pinned = Vec::new();
        let mut b = Builder {
            nodes: Vec::new(),
            rates: vec![0],
            delays: vec![Dur::ZERO],
        };
        for (i, raw) in text.lines().enumerate() {
            let ln = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |s: &str| {
                s.parse::<u64>()
                    .ok()
                    .or_else(|| by_name.get(s).copied())
                    .ok_or_else(|| err(ln, format!("`{s}` is not a number or a node's name")))
            };
            match w.as_slice() {
                ["hosts", n] => {
                    if hosts.is_some() || !b.nodes.is_empty() {
                        return Err(err(ln, "`hosts` must come first, once".into()));
                    }
                    let n = num(n)?;
                    if !(2..=1 << 20).contains(&n) {
                        return Err(err(ln, "hosts must be 2 to 2^20".into()));
                    }
                    hosts = Some(n as u32);
                    for _ in 0..n {
                        b.add(0);
                    }
                }
                ["switches", n] => {
                    if hosts.is_none() {
                        return Err(err(ln, "`hosts` must come before `switches`".into()));
                    }
                    let n = num(n)?;
                    if n > 1 << 20 {
                        return Err(err(ln, "too many switches".into()));
                    }
                    for _ in 0..n {
                        b.add(1);
                    }
                }
                ["link", a, c, gbps, delay] => {
                    let (a, c) = (num(a)?, num(c)?);
                    let n = b.nodes.len() as u64;
                    if a >= n || c >= n || a == c {
                        return Err(err(ln, format!("link {a} {c}: no such pair of nodes")));
                    }
                    let g: f64 = gbps
                        .parse()
                        .map_err(|_| err(ln, format!("`{gbps}` is not a rate")))?;
                    if !(g > 0.0 && g <= 100_000.0) {
                        return Err(err(ln, "rate must be in (0, 100000] Gb/s".into()));
                    }
                    let d = num(delay)?;
                    if b.nodes[a as usize].ports.len() >= u16::MAX as usize {
                        return Err(err(ln, "too many ports".into()));
                    }
                    b.link_with(
                        a as u32,
                        c as u32,
                        (g * 1e9).round() as u64,
                        Dur::from_nanos(d),
                    );
                }
                ["name", node, label] => {
                    let node = num(node)?;
                    if node >= b.nodes.len() as u64 {
                        return Err(err(ln, format!("name {node}: no such node")));
                    }
                    if label.parse::<u64>().is_ok() || by_name.contains_key(*label) {
                        return Err(err(ln, format!("name `{label}`: a number or taken")));
                    }
                    by_name.insert(label.to_string(), node);
                    names.insert(node as u32, label.to_string());
                }
                ["route", sw, edge, ports @ ..] if !ports.is_empty() => {
                    let (sw, edge) = (num(sw)?, num(edge)?);
                    let mut list = Vec::new();
                    for p in ports {
                        let p = num(p)?;
                        let ok = b
                            .nodes
                            .get(sw as usize)
                            .is_some_and(|n| (p as usize) < n.ports.len());
                        if !ok {
                            return Err(err(ln, format!("route: switch {sw} has no port {p}")));
                        }
                        list.push(p as u16);
                    }
                    pinned.push((sw as u32, edge as u32, list, ln));
                }
                _ => return Err(err(ln, format!("cannot read `{line}`"))),
            }
        }
        let hosts = hosts.ok_or_else(|| err(0, "no `hosts` line".into()))?;
        for h in 0..hosts {
            if b.nodes[h as usize].ports.len() != 1 {
                return Err(err(0, format!("host {h} must have exactly one link")));
            }
            let peer = b.nodes[h as usize].ports[0].peer;
            if peer < hosts {
                return Err(err(
                    0,
                    format!("host {h} links to host {peer}; hosts link to switches"),
                ));
            }
        }
        let mut t = Topology::raw(b, hosts);
        t.names = names;
        t.pinned = pinned;
        t.path = path.to_string();
        Ok(t)
    }

    fn raw(b: Builder, hosts: u32) -> Topology {
        Topology {
            nodes: b.nodes,
            hosts,
            group: Vec::new(),
            down_port: Vec::new(),
            group_switch: Vec::new(),
            route_set: Vec::new(),
            sets: Vec::new(),
            route_ports: Vec::new(),
            group_dist: Vec::new(),
            names: BTreeMap::new(),
            pinned: Vec::new(),
            path: String::new(),
        }
    }

    /// Computes routes: a breadth-first search over the switches from every edge switch.
    fn finish(mut self) -> Result<Topology, TopologyError> {
        let n = self.nodes.len();
        let h = self.hosts as usize;
        let switches = n - h;
        // Group the hosts by edge switch, numbering the groups in host order.
        let mut group_of_switch = vec![u32::MAX; n];
        for host in 0..h {
            let p = self.nodes[host].ports[0];
            let e = p.peer as usize;
            if group_of_switch[e] == u32::MAX {
                group_of_switch[e] = self.group_switch.len() as u32;
                self.group_switch.push(p.peer);
            }
            self.group.push(group_of_switch[e]);
            self.down_port.push(p.peer_port);
        }
        let groups = self.group_switch.len();
        // A host of each group, to name a disconnected pair.
        let mut member = vec![0u32; groups];
        for host in (0..h).rev() {
            member[self.group[host] as usize] = host as u32;
        }
        let mut route_set = vec![0u16; switches * groups];
        let mut interned: BTreeMap<Vec<u16>, u16> = BTreeMap::new();
        let mut sets = Vec::new();
        let mut ports = Vec::new();
        let mut hops = Vec::new();
        let mut group_dist = vec![0u16; groups * groups];
        let mut dist = vec![u32::MAX; n];
        let mut queue = VecDeque::new();
        for (g, &edge) in self.group_switch.iter().enumerate() {
            let edge = edge as usize;
            dist.fill(u32::MAX);
            dist[edge] = 0;
            queue.clear();
            queue.push_back(edge);
            while let Some(u) = queue.pop_front() {
                for p in &self.nodes[u].ports {
                    let v = p.peer as usize;
                    // Hosts do not forward.
                    if v >= h && dist[v] == u32::MAX {
                        dist[v] = dist[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            for (other, &e) in self.group_switch.iter().enumerate() {
                let d = dist[e as usize];
                if d == u32::MAX {
                    return Err(TopologyError::Disconnected(member[other], member[g]));
                }
                group_dist[g * groups + other] = u16::try_from(d).unwrap_or(u16::MAX);
            }
            for s in 0..switches {
                let node = h + s;
                hops.clear();
                if dist[node] != u32::MAX {
                    for (pi, p) in self.nodes[node].ports.iter().enumerate() {
                        let v = p.peer as usize;
                        // Next hop one step closer (the edge switch's own entry stays empty:
                        // its hosts are reached by `down_port`).
                        if v >= h && dist[v] + 1 == dist[node] {
                            hops.push(pi as u16);
                        }
                    }
                }
                let id = match interned.get(&hops) {
                    Some(&id) => id,
                    None => {
                        let id = u16::try_from(sets.len())
                            .map_err(|_| TopologyError::TooManyRouteSets)?;
                        sets.push((ports.len() as u32, hops.len() as u16));
                        ports.extend_from_slice(&hops);
                        interned.insert(hops.clone(), id);
                        id
                    }
                };
                route_set[s * groups + g] = id;
            }
        }
        for (sw, edge, list, line) in std::mem::take(&mut self.pinned) {
            let err = |msg: String| TopologyError::Parse {
                path: self.path.clone(),
                line,
                msg,
            };
            let g = match (sw as usize)
                .checked_sub(h)
                .zip(group_of_switch.get(edge as usize))
            {
                Some((s, &g)) if g != u32::MAX && s < switches => (s, g as usize),
                _ => {
                    return Err(err(format!(
                        "route {sw} {edge}: {sw} must be a switch and {edge} an edge switch"
                    )))
                }
            };
            let (start, len) = sets[usize::from(route_set[g.0 * groups + g.1])];
            let allowed = &ports[start as usize..start as usize + len as usize];
            if let Some(p) = list.iter().find(|p| !allowed.contains(p)) {
                return Err(err(format!(
                    "route {sw} {edge}: port {p} is not on a shortest path (equal-cost ports: {allowed:?})"
                )));
            }
            let id = u16::try_from(sets.len()).map_err(|_| TopologyError::TooManyRouteSets)?;
            sets.push((ports.len() as u32, list.len() as u16));
            ports.extend_from_slice(&list);
            route_set[g.0 * groups + g.1] = id;
        }
        self.route_set = route_set;
        self.sets = sets;
        self.route_ports = ports;
        self.group_dist = group_dist;
        Ok(self)
    }

    /// A node's name in reports: the topology file's `name`, else `hN` (host) or `sN`.
    pub fn node_name(&self, n: u32) -> String {
        match self.names.get(&n) {
            Some(s) => s.clone(),
            None if n < self.hosts => format!("h{n}"),
            None => format!("s{n}"),
        }
    }

    /// The edge switch (ToR) of host `h`.
    pub fn edge_of(&self, h: u32) -> u32 {
        self.nodes[h as usize].ports[0].peer
    }

    /// Switch ports that face a host: (switch, port) → the host.
    pub fn port_host(&self, node: u32, port: usize) -> Option<u32> {
        let p = self.nodes[node as usize].ports.get(port)?;
        (p.peer < self.hosts).then_some(p.peer)
    }

    /// Equal-cost next-hop ports at switch `node` towards host `dst` (empty when `node` cannot
    /// reach it).
    #[inline]
    pub fn next_hops(&self, node: u32, dst: u32) -> &[u16] {
        let d = dst as usize;
        let g = self.group[d] as usize;
        if self.group_switch[g] == node {
            return std::slice::from_ref(&self.down_port[d]);
        }
        let groups = self.group_switch.len();
        let (start, len) =
            self.sets[usize::from(self.route_set[(node - self.hosts) as usize * groups + g])];
        &self.route_ports[start as usize..start as usize + len as usize]
    }

    /// [`Topology::next_hops`], and whether `node` is `dst`'s edge switch (the last hop, where
    /// a ToR looks the destination up in its ARP and MAC tables).
    #[inline]
    pub fn route(&self, node: u32, dst: u32) -> (&[u16], bool) {
        let d = dst as usize;
        let g = self.group[d] as usize;
        if self.group_switch[g] == node {
            return (std::slice::from_ref(&self.down_port[d]), true);
        }
        let groups = self.group_switch.len();
        let (start, len) =
            self.sets[usize::from(self.route_set[(node - self.hosts) as usize * groups + g])];
        (
            &self.route_ports[start as usize..start as usize + len as usize],
            false,
        )
    }

    /// Links on a shortest path between two hosts.
    pub fn hops(&self, a: u32, b: u32) -> u32 {
        if a == b {
            return 0;
        }
        let groups = self.group_switch.len();
        let (ga, gb) = (
            self.group[a as usize] as usize,
            self.group[b as usize] as usize,
        );
        u32::from(self.group_dist[gb * groups + ga]) + 2
    }

    /// The most links between any two hosts.
    pub fn diameter(&self) -> u32 {
        match self.hosts {
            0 | 1 => 0,
            _ => self.group_dist.iter().copied().max().map_or(0, u32::from) + 2,
        }
    }

    /// Number of switches.
    pub fn switches(&self) -> u32 {
        self.nodes.len() as u32 - self.hosts
    }

    /// The host link of host `h`.
    pub fn host_port(&self, h: u32) -> &Port {
        &self.nodes[h as usize].ports[0]
    }

    /// The slowest link rate and the longest one-way delay in the network (for ideal FCTs and
    /// the BDP cap).
    pub fn slowest_rate(&self) -> u64 {
        self.nodes
            .iter()
            .flat_map(|n| n.ports.iter().map(|p| p.rate_bps))
            .min()
            .unwrap_or(0)
    }

    /// Cuts the network into at most `parts` partitions for parallel simulation
    /// ([`crate::parallel`]); returns each node's partition. The network is first split into
    /// *blocks*: what stays connected without the top tier's switches (in a fat-tree, the
    /// pods; in a leaf-spine, each leaf with its hosts), or, in a two-level network, each edge
    /// switch with its hosts. Blocks are dealt out in contiguous runs of roughly equal host
    /// counts; every remaining switch, tier by tier, joins the partition that holds most of its
    /// already placed neighbours if one holds more than half, and otherwise the partition with
    /// the fewest nodes (the core switches of a fat-tree, linked to every pod alike, even out
    /// the load). Only links between partitions then need the lookahead: in a fat-tree, those
    /// to core switches.
    pub fn partition(&self, parts: usize) -> Vec<u16> {
        const UNSET: u16 = u16::MAX;
        let n = self.nodes.len();
        let top = self.nodes.iter().map(|x| x.tier).max().unwrap_or(0);
        // Per node, its block (u32::MAX: a switch placed afterwards).
        let mut block = vec![u32::MAX; n];
        let mut blocks = 0u32;
        if top >= 2 {
            for start in 0..self.hosts as usize {
                if block[start] != u32::MAX {
                    continue;
                }
                let mut stack = vec![start];
                block[start] = blocks;
                while let Some(x) = stack.pop() {
                    for p in &self.nodes[x].ports {
                        let y = p.peer as usize;
                        if block[y] == u32::MAX && self.nodes[y].tier < top {
                            block[y] = blocks;
                            stack.push(y);
                        }
                    }
                }
                blocks += 1;
            }
        } else {
            for (g, &sw) in self.group_switch.iter().enumerate() {
                block[sw as usize] = g as u32;
            }
            let hosts = self.hosts as usize;
            block[..hosts].copy_from_slice(&self.group[..hosts]);
            blocks = self.group_switch.len() as u32;
        }
        let parts = parts.clamp(1, (blocks as usize).max(1));
        // Deal the blocks (numbered in order of their first host) by cumulative host count.
        let mut hosts_in = vec![0usize; blocks as usize];
        for h in 0..self.hosts as usize {
            hosts_in[block[h] as usize] += 1;
        }
        let total = self.hosts.max(1) as usize;
        let mut part_of_block = Vec::with_capacity(blocks as usize);
        let mut before = 0;
        for &h in &hosts_in {
            // The partition holding this block's middle host.
            part_of_block.push(((before * 2 + h) * parts / (2 * total)).min(parts - 1) as u16);
            before += h;
        }
        // Very unequal blocks can leave a partition number unused: number the used ones 0, 1, …
        let mut used: Vec<u16> = part_of_block.clone();
        used.dedup();
        let parts = used.len().max(1);
        for p in &mut part_of_block {
            *p = used.iter().position(|u| u == p).unwrap_or(0) as u16;
        }
        let mut part = vec![UNSET; n];
        let mut nodes = vec![0usize; parts];
        for x in 0..n {
            if block[x] != u32::MAX {
                part[x] = part_of_block[block[x] as usize];
                nodes[usize::from(part[x])] += 1;
            }
        }
        let mut rest: Vec<usize> = (0..n).filter(|&x| part[x] == UNSET).collect();
        rest.sort_by_key(|&x| (self.nodes[x].tier, x));
        for x in rest {
            let mut links = vec![0usize; parts];
            for p in &self.nodes[x].ports {
                if let Some(l) = links.get_mut(usize::from(part[p.peer as usize])) {
                    *l += 1;
                }
            }
            let placed: usize = links.iter().sum();
            let most = (0..parts)
                .max_by_key(|&p| (links[p], std::cmp::Reverse(p)))
                .unwrap_or(0);
            let best = if 2 * links[most] > placed {
                most
            } else {
                (0..parts).min_by_key(|&p| (nodes[p], p)).unwrap_or(0)
            };
            part[x] = best as u16;
            nodes[best] += 1;
        }
        part
    }

    /// The largest propagation delay of any link.
    pub fn max_delay(&self) -> Dur {
        self.nodes
            .iter()
            .flat_map(|n| n.ports.iter().map(|p| p.delay))
            .max()
            .unwrap_or(Dur::ZERO)
    }

    /// The round-trip propagation delay of the longest path, assuming its links have the
    /// largest delay of the network.
    pub fn max_rtt(&self) -> Dur {
        self.max_delay()
            .saturating_mul(2 * u64::from(self.diameter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_serializes_exactly_as_dur_transmission() {
        let rates = [
            1,
            3,
            10_000_000_000,
            25_000_000_000,
            40_000_000_000,
            56_000_000_000,
            100_000_000_000,
            400_000_000_000,
            7_999_999_999_999,
            u64::MAX,
        ];
        for rate in rates {
            let p = Port::new(1, 0, rate, Dur::ZERO);
            for bytes in [0, 1, 64, 1078, 4096 + 58, 1 << 40, u64::MAX / 3] {
                assert_eq!(
                    p.transmission(bytes),
                    Dur::transmission(bytes, rate),
                    "{bytes} B at {rate} b/s"
                );
            }
        }
        assert_eq!(Port::new(1, 0, 0, Dur::ZERO).transmission(1), Dur::MAX);
    }

    fn cfg(kind: TopologyKind) -> TopologyConfig {
        TopologyConfig {
            kind,
            ..TopologyConfig::default()
        }
    }

    #[test]
    fn fat_tree_k6_is_the_papers_network() {
        let t = Topology::build(&cfg(TopologyKind::FatTree), Path::new(".")).expect("builds");
        assert_eq!(t.hosts, 54);
        assert_eq!(t.switches(), 45);
        // Every switch has k = 6 ports.
        assert!(t.nodes[54..].iter().all(|n| n.ports.len() == 6));
        assert_eq!(t.diameter(), 6);
        // Same edge switch: 2 links; same pod: 4; other pod: 6.
        assert_eq!(t.hops(0, 1), 2);
        assert_eq!(t.hops(0, 3), 4);
        assert_eq!(t.hops(0, 53), 6);
        // An edge switch going up has k/2 = 3 equal-cost choices; going down, one.
        let edge0 = t.host_port(0).peer;
        assert_eq!(t.next_hops(edge0, 53).len(), 3);
        assert_eq!(t.next_hops(edge0, 1).len(), 1);
        // BDP: 24 µs round trip × 40 Gb/s = 120 KB (SPEC E0).
        assert_eq!(t.max_rtt(), Dur::from_micros(24));
    }

    /// A fat-tree is cut between pods: each pod (hosts, edge and aggregation switches) whole
    /// in one partition, the core switches spread evenly, and only core links crossing.
    #[test]
    fn a_fat_tree_is_partitioned_by_pods() {
        let mut c = cfg(TopologyKind::FatTree);
        c.k = 8;
        let t = Topology::build(&c, Path::new(".")).expect("builds");
        for parts in [1, 2, 3, 4, 8] {
            let p = t.partition(parts);
            let used = usize::from(p.iter().copied().max().unwrap_or(0)) + 1;
            assert_eq!(used, parts);
            let mut nodes = vec![0; parts];
            for (n, node) in t.nodes.iter().enumerate() {
                nodes[usize::from(p[n])] += 1;
                for port in &node.ports {
                    let peer = &t.nodes[port.peer as usize];
                    if p[n] != p[port.peer as usize] {
                        assert!(node.tier == 3 || peer.tier == 3, "{n} -- {}", port.peer);
                    }
                }
            }
            // 128 hosts and 80 switches: at most a pod's 24 nodes plus a core switch apart.
            let (lo, hi) = (nodes.iter().min(), nodes.iter().max());
            assert!(
                hi.zip(lo).is_some_and(|(h, l)| h - l <= 25),
                "{parts}: {nodes:?}"
            );
        }
        // Never more partitions than edge switches.
        let d = Topology::build(&cfg(TopologyKind::Dumbbell), Path::new(".")).expect("builds");
        assert_eq!(d.partition(8).iter().copied().max(), Some(1));
    }

    /// Each built-in topology, small (a k = 4 fat-tree and the default leaf-spine and dumbbell).
    fn small_builtins() -> Vec<Topology> {
        [
            TopologyKind::FatTree,
            TopologyKind::LeafSpine,
            TopologyKind::Dumbbell,
        ]
        .into_iter()
        .map(|kind| {
            let mut c = cfg(kind);
            c.k = 4;
            Topology::build(&c, Path::new(".")).expect("builds")
        })
        .collect()
    }

    #[test]
    fn routes_lead_to_the_destination() {
        for t in small_builtins() {
            for src in 0..t.hosts {
                for dst in 0..t.hosts {
                    if src == dst {
                        continue;
                    }
                    // Follow the first choice (and, separately, the last) hop by hop.
                    for pick_last in [false, true] {
                        let mut node = t.host_port(src).peer;
                        let mut links = 1;
                        while node >= t.hosts {
                            let hops = t.next_hops(node, dst);
                            assert!(!hops.is_empty());
                            let p = if pick_last {
                                hops[hops.len() - 1]
                            } else {
                                hops[0]
                            };
                            node = t.nodes[node as usize].ports[p as usize].peer;
                            links += 1;
                        }
                        assert_eq!(node, dst);
                        assert_eq!(links, t.hops(src, dst));
                    }
                }
            }
        }
    }

    /// The next hops by definition: a breadth-first search from the destination host itself,
    /// through switches only.
    fn reference_next_hops(t: &Topology, node: u32, dst: u32) -> Vec<u16> {
        let n = t.nodes.len();
        let mut dist = vec![u32::MAX; n];
        dist[dst as usize] = 0;
        let mut queue = VecDeque::from([dst as usize]);
        while let Some(u) = queue.pop_front() {
            if u < t.hosts as usize && u != dst as usize {
                continue;
            }
            for p in &t.nodes[u].ports {
                if dist[p.peer as usize] == u32::MAX {
                    dist[p.peer as usize] = dist[u] + 1;
                    queue.push_back(p.peer as usize);
                }
            }
        }
        let node = node as usize;
        (0..t.nodes[node].ports.len() as u16)
            .filter(|&pi| {
                let v = t.nodes[node].ports[pi as usize].peer as usize;
                dist[node] != u32::MAX
                    && dist[v].wrapping_add(1) == dist[node]
                    && (v >= t.hosts as usize || v == dst as usize)
            })
            .collect()
    }

    /// Routes kept per edge switch are exactly the per-host shortest-path next hops, on the
    /// built-in topologies and on an irregular one (a ring of four switches with a chord).
    #[test]
    fn grouped_routes_equal_per_host_shortest_paths() {
        let ring = "hosts 6\nswitches 4\nlink 0 6 10 1\nlink 1 6 10 1\nlink 2 7 10 1\n\
                    link 3 8 10 1\nlink 4 9 10 1\nlink 5 9 10 1\nlink 6 7 10 1\n\
                    link 7 8 10 1\nlink 8 9 10 1\nlink 9 6 10 1\nlink 6 8 10 1\n";
        let mut nets = vec![Topology::parse(ring, "ring.topo")
            .and_then(Topology::finish)
            .expect("valid")];
        nets.extend(small_builtins());
        for t in &nets {
            for node in t.hosts..t.nodes.len() as u32 {
                for dst in 0..t.hosts {
                    assert_eq!(
                        t.next_hops(node, dst),
                        reference_next_hops(t, node, dst).as_slice(),
                        "switch {node} towards host {dst}"
                    );
                }
            }
        }
        // The ring: host 2 hangs off switch 7 and host 4 off switch 9, two links apart through
        // either 6 or 8 — two equal-cost choices at 7.
        let t = &nets[0];
        assert_eq!(t.hops(2, 4), 4);
        assert_eq!(t.next_hops(7, 4).len(), 2);
        assert_eq!(t.hops(0, 1), 2);
        assert_eq!(t.diameter(), 4);
    }

    #[test]
    fn topology_file_parses_and_reports_errors_with_lines() {
        let text = "# a tiny star\nhosts 3\nswitches 1\nlink 0 3 10 1000\nlink 1 3 10 1000\nlink 2 3 10 1000\n";
        let t = Topology::parse(text, "t.topo")
            .and_then(Topology::finish)
            .expect("valid");
        assert_eq!((t.hosts, t.switches(), t.hops(0, 2)), (3, 1, 2));
        let e = Topology::parse("hosts 2\nswitches 1\nlink 0 9 10 1\n", "t.topo").expect_err("bad");
        assert!(e.to_string().starts_with("t.topo:3:"), "{e}");
        let e = Topology::parse("hosts 2\nswitches 1\nlink 0 2 10 1\n", "t.topo").expect_err("bad");
        assert!(e.to_string().contains("exactly one link"), "{e}");
    }
}
