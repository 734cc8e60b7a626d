//! What the shim's devices are, read from the environment once per process.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `IRN_IBV_DEVICES` | comma-separated entries, one device each (`irn0`, `irn1`, …): an address, or an interface (its first IPv4 address, else its first IPv6 address that is not link-local), each optionally `NAME=` | every interface that is up with an IPv4 address, loopback last |
//! | `IRN_IBV_MODE` | loss recovery: `roce` (go-back-N, interoperates with RoCE NICs and rxe) or `irn` (both ends irn) | `roce` |
//! | `IRN_IBV_PORT` | the UDP port devices listen on, and peers are reached at | 4791 |
//! | `IRN_IBV_LOSS` | probability each sent packet is dropped (testing loss recovery) | 0 |
//! | `IRN_IBV_SEED` | the seed of that loss | 1 |
//! | `IRN_IBV_BUSY_POLL` | `1`: polling a CQ drives the device (no engine wake-ups) | 0 |
//! | `IRN_IBV_WAIT_DRIVES` | `1`: a thread waiting for a completion drives the device, asleep in `poll(2)` on its socket between rounds (`DeviceConfig::wait_drives`; perftest's spinning `ibv_poll_cq` waits so after 256 empty polls); ignored with `IRN_IBV_BUSY_POLL=1` or `IRN_IBV_POLL_WAIT_US=0` | 0 |
//! | `IRN_IBV_POLL_WAIT_US` | how long an `ibv_poll_cq` on a CQ found empty 256 times in a row waits for a completion (0: never; `ibv_poll_cq` then always answers at once) | 100 |
//! | `IRN_IBV_PAUSE` | `1`: each device honours the PFC and PAUSE frames that reach its interface, and serializes at the interface's rate (needs `CAP_NET_RAW`) | 0 |
//! | `IRN_IBV_VLAN` | a VLAN, 0 to 4095: each device sends its frames with an 802.1Q tag of that VLAN whose PCP is the queue pair's priority, the GRH traffic class's DSCP ÷ 8 (0: priority tags; needs `CAP_NET_RAW`; IPv4) | none |
//!
//! A value that cannot mean anything is an error naming the variable: the device list comes
//! back empty, with the reason on standard error (a program's own "no devices" message follows
//! it) — never a device that silently runs something else.

use std::net::IpAddr;

use irn_verbs::QpMode;

/// One device: its name and the address it listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// `irn0`, … (at most 63 bytes: `ibv_device.name`).
    pub name: String,
    /// The address its GID names and its socket binds.
    pub addr: IpAddr,
    /// The interface that address is on, if the host has it.
    pub iface: Option<String>,
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The devices, in `ibv_get_device_list` order.
    pub devices: Vec<DeviceSpec>,
    /// Loss recovery of every queue pair.
    pub mode: QpMode,
    /// UDP port.
    pub port: u16,
    /// Send-path drop probability.
    pub loss: f64,
    /// Seed of the drops.
    pub seed: u64,
    /// Busy polling.
    pub busy_poll: bool,
    /// Waiting threads drive the device (`DeviceConfig::wait_drives`).
    pub wait_drives: bool,
    /// How long a poll of a CQ that keeps being empty waits for a completion.
    pub poll_wait: std::time::Duration,
    /// Devices honour link-level pauses on their interfaces.
    pub pause: bool,
    /// Devices tag their frames, in this VLAN.
    pub vlan: Option<u16>,
}

/// A variable whose value cannot mean anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The variable.
    pub key: &'static str,
    /// Its value.
    pub value: String,
    /// What it should be.
    pub expected: &'static str,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?}: expected {}",
            self.key, self.value, self.expected
        )
    }
}

impl Config {
    /// Reads the configuration through `var` (the environment, or a test's map); `interfaces`
    /// gives the host's interfaces (the default devices, and the names an entry may give).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        interfaces: impl FnOnce() -> Vec<Interface>,
    ) -> Result<Config, ConfigError> {
        let bad = |key, value: &str, expected| ConfigError {
            key,
            value: value.to_string(),
            expected,
        };
        let ifaces = interfaces();
        let devices = match var("IRN_IBV_DEVICES") {
            Some(list) => parse_devices(&list, &ifaces)
                .ok_or_else(|| bad("IRN_IBV_DEVICES", &list, DEVICES_EXPECTED))?,
            None => {
                let mut up: Vec<&Interface> = ifaces
                    .iter()
                    .filter(|i| i.up && i.addrs.iter().any(IpAddr::is_ipv4))
                    .collect();
                up.sort_by_key(|i| i.loopback);
                up.into_iter()
                    .enumerate()
                    .filter_map(|(n, i)| {
                        Some(DeviceSpec {
                            name: format!("irn{n}"),
                            addr: i.addr()?,
                            iface: Some(i.name.clone()),
                        })
                    })
                    .collect()
            }
        };
        let mode = match var("IRN_IBV_MODE").as_deref() {
            None | Some("roce") => QpMode::Roce,
            Some("irn") => QpMode::Irn,
            Some(v) => return Err(bad("IRN_IBV_MODE", v, "roce or irn")),
        };
        let port = match var("IRN_IBV_PORT") {
            None => irn_verbs::ROCE_PORT,
            Some(v) => v
                .parse()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad("IRN_IBV_PORT", &v, "a UDP port, 1-65535"))?,
        };
        let loss = match var("IRN_IBV_LOSS") {
            None => 0.0,
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..1.0).contains(p))
                .ok_or_else(|| bad("IRN_IBV_LOSS", &v, "a probability in [0, 1)"))?,
        };
        let seed = match var("IRN_IBV_SEED") {
            None => 1,
            Some(v) => v
                .parse()
                .map_err(|_| bad("IRN_IBV_SEED", &v, "an unsigned integer"))?,
        };
        let busy_poll = match var("IRN_IBV_BUSY_POLL").as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => return Err(bad("IRN_IBV_BUSY_POLL", v, "0 or 1")),
        };
        let wait_drives = match var("IRN_IBV_WAIT_DRIVES").as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => return Err(bad("IRN_IBV_WAIT_DRIVES", v, "0 or 1")),
        };
        let poll_wait = match var("IRN_IBV_POLL_WAIT_US") {
            None => std::time::Duration::from_micros(100),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|&us| us <= 1_000_000)
                .map(std::time::Duration::from_micros)
                .ok_or_else(|| bad("IRN_IBV_POLL_WAIT_US", &v, "microseconds, 0 to 1000000"))?,
        };
        let pause = match var("IRN_IBV_PAUSE").as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => return Err(bad("IRN_IBV_PAUSE", v, "0 or 1")),
        };
        let vlan = match var("IRN_IBV_VLAN") {
            None => None,
            Some(v) => Some(
                v.parse::<u16>()
                    .ok()
                    .filter(|&vid| vid <= 4095)
                    .ok_or_else(|| bad("IRN_IBV_VLAN", &v, "a VLAN identifier, 0 to 4095"))?,
            ),
        };
        if pause || vlan.is_some() {
            // Both need the interface a device's address is on.
            if devices.iter().any(|d| d.iface.is_none()) {
                let key = if vlan.is_some() {
                    "IRN_IBV_VLAN"
                } else {
                    "IRN_IBV_PAUSE"
                };
                let value = var(key).unwrap_or_default();
                return Err(ConfigError {
                    key,
                    value,
                    expected: "devices on addresses the host's interfaces hold",
                });
            }
            if vlan.is_some() && devices.iter().any(|d| !d.addr.is_ipv4()) {
                return Err(bad(
                    "IRN_IBV_VLAN",
                    &var("IRN_IBV_VLAN").unwrap_or_default(),
                    "devices on IPv4 addresses (tagged frames are built for IPv4)",
                ));
            }
        }
        Ok(Config {
            devices,
            mode,
            port,
            loss,
            seed,
            busy_poll,
            wait_drives,
            poll_wait,
            pause,
            vlan,
        })
    }

    /// The process's configuration.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(|k| std::env::var(k).ok(), interfaces)
    }
}

const DEVICES_EXPECTED: &str = "comma-separated IP addresses or interfaces with an address, \
     each optionally NAME=, names unique, under 64 bytes";

/// A network interface of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`eth0`).
    pub name: String,
    /// Its addresses, in the kernel's order.
    pub addrs: Vec<IpAddr>,
    /// Whether it is up.
    pub up: bool,
    /// Whether it is a loopback.
    pub loopback: bool,
}

impl Interface {
    /// The address a device on it takes: the first IPv4 one, else the first IPv6 one that is
    /// not link-local (a link-local GID needs a scope a UDP peer address cannot carry here).
    pub fn addr(&self) -> Option<IpAddr> {
        self.addrs
            .iter()
            .copied()
            .find(IpAddr::is_ipv4)
            .or_else(|| {
                self.addrs.iter().copied().find(|a| match a {
                    IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
                    IpAddr::V4(_) => false,
                })
            })
    }
}

fn parse_devices(list: &str, ifaces: &[Interface]) -> Option<Vec<DeviceSpec>> {
    let mut out: Vec<DeviceSpec> = Vec::new();
    for (i, entry) in list.split(',').map(str::trim).enumerate() {
        let (name, addr) = match entry.split_once('=') {
            Some((n, a)) => (n.trim().to_string(), a.trim()),
            None => (format!("irn{i}"), entry),
        };
        let (addr, iface): (IpAddr, Option<String>) = match addr.parse() {
            Ok(a) => (
                a,
                ifaces
                    .iter()
                    .find(|f| f.addrs.contains(&a))
                    .map(|f| f.name.clone()),
            ),
            Err(_) => {
                let f = ifaces.iter().find(|f| f.name == addr)?;
                (f.addr()?, Some(f.name.clone()))
            }
        };
        let valid_name = !name.is_empty()
            && name.len() < 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name || out.iter().any(|d| d.name == name) {
            return None;
        }
        out.push(DeviceSpec { name, addr, iface });
    }
    Some(out)
}

/// The host's interfaces and their IPv4 and IPv6 addresses (`getifaddrs(3)`).
pub fn interfaces() -> Vec<Interface> {
    let mut found: Vec<Interface> = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a list it allocated, freed below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Vec::new();
    }
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated interface name.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let at = match found.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                found.push(Interface {
                    name,
                    addrs: Vec::new(),
                    up: ifa.ifa_flags & (libc::IFF_UP as u32) != 0,
                    loopback: ifa.ifa_flags & (libc::IFF_LOOPBACK as u32) != 0,
                });
                found.len() - 1
            }
        };
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points at a sockaddr of the family it names.
        let ip = match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
            }
            libc::AF_INET6 => {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::from(sin6.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        found[at].addrs.push(ip);
    }
    // SAFETY: the list getifaddrs returned, freed once; nothing refers to it any more.
    unsafe { libc::freeifaddrs(ifap) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let iface = |name: &str, addrs: &[&str], up, loopback| Interface {
            name: name.into(),
            addrs: addrs.iter().map(|a| a.parse().expect("ip")).collect(),
            up,
            loopback,
        };
        Config::from_vars(
            |k| m.get(k).cloned(),
            || {
                vec![
                    iface("lo", &["127.0.0.1", "::1"], true, true),
                    iface("eth0", &["10.0.0.7", "fe80::1"], true, false),
                    iface("eth1", &["fe80::2", "fd00::7"], true, false),
                    iface("eth2", &["10.9.9.9"], false, false),
                ]
            },
        )
    }

    #[test]
    fn defaults_are_one_roce_device_per_interface() {
        let c = read(&[]).expect("valid");
        assert_eq!(c.mode, QpMode::Roce);
        assert_eq!(
            (c.port, c.loss, c.seed, c.busy_poll, c.wait_drives),
            (4791, 0.0, 1, false, false)
        );
        assert_eq!(c.poll_wait, std::time::Duration::from_micros(100));
        let names: Vec<_> = c
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.addr.to_string()))
            .collect();
        assert_eq!(
            names,
            [("irn0", "10.0.0.7".into()), ("irn1", "127.0.0.1".into())]
        );
    }

    #[test]
    fn interfaces_name_devices_by_their_addresses() {
        let c = read(&[("IRN_IBV_DEVICES", "eth0, v6=eth1,lo")]).expect("valid");
        let got: Vec<(&str, String)> = c
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.addr.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                ("irn0", "10.0.0.7".to_string()),
                ("v6", "fd00::7".to_string()),
                ("irn2", "127.0.0.1".to_string())
            ],
            "IPv4 first; else an IPv6 address that is not link-local"
        );
        for bad in ["eth9", "a=eth0,a=lo", ""] {
            assert!(read(&[("IRN_IBV_DEVICES", bad)]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn devices_modes_and_loss_are_read() {
        let c = read(&[
            ("IRN_IBV_DEVICES", "127.0.0.2, east=::1"),
            ("IRN_IBV_MODE", "irn"),
            ("IRN_IBV_PORT", "5000"),
            ("IRN_IBV_LOSS", "0.01"),
            ("IRN_IBV_SEED", "9"),
            ("IRN_IBV_BUSY_POLL", "1"),
            ("IRN_IBV_WAIT_DRIVES", "1"),
        ])
        .expect("valid");
        assert_eq!(
            c.devices[0],
            DeviceSpec {
                name: "irn0".into(),
                addr: "127.0.0.2".parse().expect("ip"),
                iface: None,
            }
        );
        assert_eq!(
            c.devices[1],
            DeviceSpec {
                name: "east".into(),
                addr: "::1".parse().expect("ip"),
                iface: Some("lo".into()),
            }
        );
        assert_eq!(
            (c.mode, c.port, c.loss, c.seed, c.busy_poll, c.wait_drives),
            (QpMode::Irn, 5000, 0.01, 9, true, true)
        );
    }

    #[test]
    fn tagging_and_pauses_need_each_devices_interface() {
        let c = read(&[
            ("IRN_IBV_DEVICES", "eth0,10.9.9.9"),
            ("IRN_IBV_VLAN", "0"),
            ("IRN_IBV_PAUSE", "1"),
        ])
        .expect("valid");
        let ifaces: Vec<_> = c.devices.iter().map(|d| d.iface.as_deref()).collect();
        assert_eq!(ifaces, [Some("eth0"), Some("eth2")]);
        assert_eq!((c.vlan, c.pause), (Some(0), true));
        let d = read(&[]).expect("valid");
        assert_eq!((d.vlan, d.pause), (None, false));
        // An address no interface holds has no interface to tag or read pauses on.
        let e = read(&[("IRN_IBV_DEVICES", "10.1.1.1"), ("IRN_IBV_VLAN", "5")])
            .expect_err("no interface");
        assert_eq!(e.key, "IRN_IBV_VLAN");
        let e = read(&[("IRN_IBV_DEVICES", "10.1.1.1"), ("IRN_IBV_PAUSE", "1")])
            .expect_err("no interface");
        assert_eq!(e.key, "IRN_IBV_PAUSE");
        // Tagged frames are IPv4's; pauses are any device's.
        let e = read(&[("IRN_IBV_DEVICES", "eth1"), ("IRN_IBV_VLAN", "0")]).expect_err("IPv6");
        assert!(e.to_string().contains("IPv4"), "{e}");
        assert!(read(&[("IRN_IBV_DEVICES", "eth1"), ("IRN_IBV_PAUSE", "1")]).is_ok());
    }

    #[test]
    fn values_that_mean_nothing_are_refused_by_name() {
        for (key, value) in [
            ("IRN_IBV_DEVICES", "not-an-address"),
            ("IRN_IBV_DEVICES", "a=127.0.0.1,a=127.0.0.2"),
            ("IRN_IBV_DEVICES", "we ird=127.0.0.1"),
            ("IRN_IBV_MODE", "gbn"),
            ("IRN_IBV_PORT", "0"),
            ("IRN_IBV_PORT", "70000"),
            ("IRN_IBV_LOSS", "1.5"),
            ("IRN_IBV_LOSS", "NaN"),
            ("IRN_IBV_SEED", "-1"),
            ("IRN_IBV_BUSY_POLL", "yes"),
            ("IRN_IBV_WAIT_DRIVES", "2"),
            ("IRN_IBV_POLL_WAIT_US", "-5"),
            ("IRN_IBV_POLL_WAIT_US", "2000000"),
            ("IRN_IBV_PAUSE", "yes"),
            ("IRN_IBV_VLAN", "4096"),
            ("IRN_IBV_VLAN", "pcp"),
        ] {
            let e = read(&[(key, value)]).expect_err(value);
            assert_eq!(e.key, key);
            assert!(e.to_string().starts_with(&format!("{key}=")), "{e}");
        }
    }
}
