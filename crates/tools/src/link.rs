//! What every tool shares to reach its peer and open its device: the link flags (impairment,
//! capture, receive path, pauses, GID), the out-of-band TCP connection that perftest and the
//! rdma-core examples exchange their queue pairs over, and the numbers rdma-core prints for a
//! completion's status.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use irn_verbs::{DeviceConfig, Impairment, QpMode, ReceivePath, ROCE_PORT};

use crate::error::{Context, Result};
use crate::{bail, usage};

/// The flags both tools share: the device's UDP port, impairment, capture and counters.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct LinkArgs {
    /// Drop this fraction (0–1) of the packets this side sends and receives (seeded).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Which of this side's directions `--loss` drops in: `both`, `send` or `receive`.
    /// `send` alone keeps what the peer says last: a peer such as `ibv_rc_pingpong` that
    /// exits as soon as its own work is done cannot answer a resend, so loss of its final
    /// ACK on the way in fails the run however long this side waits.
    #[arg(long, value_enum, default_value_t = LossOn::Both)]
    pub(crate) loss_on: LossOn,
    /// Hold back this fraction (0–1) of the packets this side receives and deliver each after
    /// the next one (seeded): reordering, as packet spraying makes it.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reorder: f64,
    /// Mark this fraction (0–1) of the ECN-capable packets this side sends Congestion
    /// Experienced (seeded), as a congested switch would: the marks reach the peer through
    /// the kernel, and its congestion notification answers them (with `irn perf --cc`, whose
    /// queue pairs run a controller; the other tools' run none).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) ce_mark: f64,
    /// Hold every packet this side receives this long, µs (a slow link or host).
    #[arg(long, default_value_t = 0)]
    pub(crate) delay_us: u64,
    /// Seed of the impairment.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Capture every packet sent and received to this pcap file.
    #[arg(long)]
    pub(crate) pcap: Option<std::path::PathBuf>,
    /// UDP port (standard peers use 4791; `irn perf` tells its peer, `irn pingpong` cannot).
    #[arg(long, default_value_t = ROCE_PORT)]
    pub(crate) udp_port: u16,
    /// Print the queue pairs' and the device's counters at the end.
    #[arg(long)]
    pub(crate) counters: bool,
    /// This end's GID, as an address of this host (IPv4 or IPv6). Default: the local address
    /// of the connection to the peer (the out-of-band TCP connection's; rping's `-a`/`-I`).
    /// Give an IPv6 address to use an IPv6 GID while the exchange runs over IPv4 (rdma-core's
    /// and perftest's tools listen on IPv4 only); the peer must then use its IPv6 GID too
    /// (`-g` / `-x` of that index).
    #[arg(long)]
    pub(crate) gid: Option<IpAddr>,
    /// Receive path: `raw` (needs CAP_NET_RAW; IPv4; sees whole packets, so every ICRC is
    /// verified and the capture holds the real bytes), `udp` (unprivileged; IPv4 ICRCs not
    /// verifiable), or `auto` (raw when permitted).
    #[arg(long, default_value_t = ReceivePath::Auto)]
    pub(crate) rx: ReceivePath,
    /// Busy polling: the thread that polls for completions receives and processes this
    /// side's packets itself, spinning, instead of waking the engine thread (lower latency,
    /// a core kept busy).
    #[arg(long)]
    pub(crate) busy_poll: bool,
    /// A thread waiting for completions receives and processes this side's packets itself,
    /// asleep in poll(2) on the device's socket between rounds, instead of being woken by the
    /// engine thread: busy polling's sleeping counterpart (one wake-up per completion instead
    /// of two, and no core kept busy).
    #[arg(long, conflicts_with = "busy_poll")]
    pub(crate) wait_drives: bool,
    /// Honour the 802.1Qbb PFC and 802.3x PAUSE frames that arrive on this interface (a
    /// packet socket: needs CAP_NET_RAW): queue pairs of a paused priority (their DSCP ÷ 8,
    /// `--tclass`) send nothing until the pause runs out or a resume comes.
    #[arg(long, value_name = "IFACE")]
    pub(crate) pause_iface: Option<String>,
    /// The link rate pause quanta are counted at (512 bit times each), e.g. `1g`; default
    /// `--line-rate` if it gives a rate, else the interface's speed (a veth reports 10 Gb/s; `irn
    /// switch` counts at its ports' speeds too), or 1 Gb/s when it reports none.
    #[arg(long, value_parser = irn_switch::parse_rate)]
    pub(crate) pause_rate: Option<u64>,
    /// The rate this side's frames leave at, as a NIC's port serializes them, e.g. `1g`, or
    /// `off` for none. Default: with `--pause-iface`, the link's rate (the one pause quanta
    /// count at) — the headroom a switch reserves assumes a sender at its line rate — and
    /// none otherwise.
    #[arg(long, value_name = "RATE", value_parser = parse_line_rate)]
    pub(crate) line_rate: Option<u64>,
    /// NIC-side PFC watchdog: a priority paused without a break this long, ms, stops this
    /// side honouring pauses, for good.
    #[arg(long, value_name = "MS")]
    pub(crate) pause_watchdog_ms: Option<f64>,
    /// Send every frame out of this interface with an 802.1Q tag whose PCP is the queue
    /// pair's priority (its DSCP ÷ 8, `--tclass`), as a NIC doing VLAN-based PFC does (a
    /// packet socket: needs CAP_NET_RAW; IPv4).
    #[arg(long, value_name = "IFACE")]
    pub(crate) vlan: Option<String>,
    /// The tag's VLAN: 0 (the default) sends priority tags, which every host takes; another
    /// reaches only hosts with an interface on that VLAN.
    #[arg(long, value_name = "VID", default_value_t = 0, requires = "vlan",
          value_parser = clap::value_parser!(u16).range(0..=4095))]
    pub(crate) vlan_id: u16,
}

/// A line rate as `--line-rate` takes it: `off` (0: unpaced) or a rate.
fn parse_line_rate(s: &str) -> std::result::Result<u64, String> {
    match s {
        "off" => Ok(0),
        _ => irn_switch::parse_rate(s).map_err(|e| format!("{e}, or off")),
    }
}

/// `host` without the brackets an IPv6 literal may be written in (`[::1]` is `::1`).
pub(crate) fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Connects (client) or accepts one connection (server) for the exchange.
pub(crate) fn oob_connect(host: Option<&str>, port: u16) -> Result<TcpStream> {
    match host {
        Some(h) => {
            // An IPv6 literal may come bracketed, as in a URL (`[::1]`).
            let h = unbracket(h);
            let addrs: Vec<SocketAddr> = (h, port)
                .to_socket_addrs()
                .with_context(|| format!("resolving {h}"))?
                .collect();
            let mut last = None;
            for a in addrs {
                match TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            match last {
                Some(e) => Err(e).with_context(|| format!("connecting to {h}:{port}")),
                None => bail!("{h} has no address"),
            }
        }
        None => {
            let (s, _) = oob_listen(port)?
                .accept()
                .context("accepting the out-of-band connection")?;
            Ok(s)
        }
    }
}

/// The listener of an out-of-band exchange: TCP `port` on every address, IPv6 and IPv4 (or
/// IPv4 alone where the host has no IPv6).
pub(crate) fn oob_listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("listening on TCP port {port}"))
}

/// The address the device binds and advertises as its GID: `--gid`, or the local address
/// the exchange runs from — so that the peer's packets and its GID agree (rxe checks that a
/// packet's source is the GID it was told).
pub(crate) fn local_ip(s: &TcpStream, link: &LinkArgs) -> Result<IpAddr> {
    if let Some(gid) = link.gid {
        return Ok(match gid {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(gid, IpAddr::V4),
            v4 => v4,
        });
    }
    let ip = s.local_addr()?.ip();
    Ok(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

impl LinkArgs {
    /// Checks what the flags alone decide — the impairments' probabilities, the capture file,
    /// `--gid` an address of this host — so that a tool refuses a bad flag before it listens
    /// or connects, rather than once a peer came (which then sees only a closed exchange).
    pub(crate) fn check(&self) -> Result<()> {
        self.check_probabilities()?;
        if let Some(path) = &self.pcap {
            // Not created here (a run refused for another reason leaves no empty file): a
            // directory, or a missing parent directory, is what can be seen without it.
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if path.is_dir() {
                usage!("--pcap: capture file {}: is a directory", path.display());
            }
            if !dir.is_dir() {
                usage!(
                    "--pcap: capture file {}: no directory {}",
                    path.display(),
                    dir.display()
                );
            }
        }
        if let Some(ip) = self.gid {
            std::net::UdpSocket::bind((ip, 0))
                .with_context(|| format!("--gid {ip}: not an address of this host"))?;
        }
        Ok(())
    }

    fn check_probabilities(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.loss) {
            usage!("--loss is a probability in 0–1, not {}", self.loss);
        }
        if !(0.0..=1.0).contains(&self.reorder) {
            usage!("--reorder is a probability in 0–1, not {}", self.reorder);
        }
        if !(0.0..=1.0).contains(&self.ce_mark) {
            usage!("--ce-mark is a probability in 0–1, not {}", self.ce_mark);
        }
        Ok(())
    }
}

/// The device configuration of `link` on `ip`, at UDP port `port`.
pub(crate) fn device_config(ip: IpAddr, port: u16, link: &LinkArgs) -> Result<DeviceConfig> {
    link.check_probabilities()?;
    let mut cfg = DeviceConfig::new(ip);
    cfg.port = port;
    cfg.seed = link.seed;
    let (tx_loss, rx_loss) = match link.loss_on {
        LossOn::Both => (link.loss, link.loss),
        LossOn::Send => (link.loss, 0.0),
        LossOn::Receive => (0.0, link.loss),
    };
    cfg.tx_impairment = Impairment {
        ce: link.ce_mark,
        ..Impairment::loss(tx_loss)
    };
    cfg.rx_impairment = Impairment {
        reorder: link.reorder,
        delay: if link.delay_us > 0 { 1.0 } else { 0.0 },
        delay_us: link.delay_us,
        ..Impairment::loss(rx_loss)
    };
    cfg.pcap = link.pcap.clone();
    cfg.receive = link.rx;
    cfg.busy_poll = link.busy_poll;
    cfg.wait_drives = link.wait_drives;
    cfg.pause_iface = link.pause_iface.clone();
    cfg.pause_link_bps = link.pause_rate.unwrap_or(0);
    cfg.line_rate_bps = link.line_rate;
    cfg.vlan = link.vlan.clone().map(|iface| irn_verbs::Vlan {
        iface,
        vid: link.vlan_id,
    });
    if let Some(ms) = link.pause_watchdog_ms {
        if !(ms.is_finite() && ms > 0.0) {
            usage!("--pause-watchdog-ms: a positive number of milliseconds, not {ms}");
        }
        cfg.pause_watchdog = Some(std::time::Duration::from_secs_f64(ms / 1e3));
    }
    Ok(cfg)
}

/// The directions `--loss` applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LossOn {
    /// Packets sent and packets received.
    Both,
    /// Packets sent only.
    Send,
    /// Packets received only.
    Receive,
}

/// `--mode`, refused before anything opens when the runtime has no such transport (the
/// library's rule, [`irn_verbs::check_runtime_mode`]), the flag named.
pub(crate) fn check_runtime_mode(mode: QpMode) -> Result<()> {
    irn_verbs::check_runtime_mode(mode).with_context(|| format!("--mode {}", mode.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        link: LinkArgs,
    }

    fn link(args: &[&str]) -> LinkArgs {
        let argv = std::iter::once("tool").chain(args.iter().copied());
        Flags::try_parse_from(argv).expect("flags parse").link
    }

    #[test]
    fn a_probability_outside_0_to_1_is_refused_naming_its_flag() {
        for (flag, value) in [("--loss", "1.5"), ("--reorder", "-0.1"), ("--ce-mark", "2")] {
            let e = link(&[&format!("{flag}={value}")])
                .check()
                .expect_err("refused");
            assert!(
                matches!(&e, Error::Usage(m) if m.starts_with(flag)),
                "{flag}: {e}"
            );
        }
        let e = device_config(IpAddr::from([127, 0, 0, 1]), 0, &link(&["--loss", "7"]))
            .expect_err("refused");
        assert!(matches!(e, Error::Usage(_)));
    }

    #[test]
    fn loss_goes_where_loss_on_says_and_delay_holds_every_packet() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        for (on, tx, rx) in [
            ("both", 0.25, 0.25),
            ("send", 0.25, 0.0),
            ("receive", 0.0, 0.25),
        ] {
            let cfg = device_config(ip, 4791, &link(&["--loss", "0.25", "--loss-on", on]))
                .expect("valid");
            assert_eq!(
                (cfg.tx_impairment.drop, cfg.rx_impairment.drop),
                (tx, rx),
                "{on}"
            );
            assert_eq!(cfg.port, 4791);
        }
        let cfg =
            device_config(ip, 0, &link(&["--delay-us", "300", "--ce-mark", "0.5"])).expect("valid");
        assert_eq!(
            (cfg.rx_impairment.delay, cfg.rx_impairment.delay_us),
            (1.0, 300)
        );
        assert_eq!(cfg.tx_impairment.ce, 0.5);
        let e = device_config(ip, 0, &link(&["--pause-watchdog-ms", "0"])).expect_err("refused");
        assert!(matches!(e, Error::Usage(m) if m.starts_with("--pause-watchdog-ms")));
    }

    #[test]
    fn a_capture_needs_a_directory_to_go_in() {
        let e = link(&["--pcap", "/nonexistent-dir-of-irn/x.pcap"])
            .check()
            .expect_err("refused");
        assert!(matches!(e, Error::Usage(m) if m.contains("no directory")));
        let e = link(&["--pcap", "/"]).check().expect_err("refused");
        assert!(matches!(e, Error::Usage(m) if m.contains("is a directory")));
    }

    #[test]
    fn gids_and_hosts_are_read_as_written() {
        assert_eq!(unbracket("[::1]"), "::1");
        assert_eq!(unbracket("10.0.0.1"), "10.0.0.1");
        assert_eq!(irn_verbs::WcStatus::RetryExcErr.ibv_number(), 12);
        assert_eq!(irn_verbs::WcStatus::Success.ibv_number(), 0);
    }
}
