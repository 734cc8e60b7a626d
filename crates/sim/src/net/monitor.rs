//! Monitoring as operators read it (SPEC N9; seed 001 §5.2): counters per (switch or NIC,
//! port, priority) — pause frames sent and received, paused time, packets and bytes each way,
//! ingress and egress drops — as mlx5 exposes `rx_prioN_pause`, `tx_prioN_pause_duration`
//! and SONiC its per-queue counters; and, every `monitor_interval_us`, a sample of each one
//! that moved (with the queue's occupancy at that instant) plus one fabric-wide point:
//! goodput, pause frames, hosts held paused, drops.
//!
//! Counters are kept only when the run asks for them (monitoring, watchdogs, faults: the
//! switch watchdog reads them), so that ordinary runs pay nothing per packet.

use irn_transport::{Dur, Time};

use super::classes::Classes;
use crate::topology::Topology;

/// Counters of one port (NIC or switch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames sent (data and control, not PFC).
    pub tx_packets: u64,
    /// Bytes sent on the wire.
    pub tx_bytes: u64,
    /// Packets dropped at this port's ingress (buffer full, lossy) or on its incoming link.
    pub drops: u64,
    /// PFC pause frames (pause and resume) sent upstream through this port.
    pub pause_sent: u64,
    /// PFC frames received.
    pub pause_received: u64,
    /// Time this port's egress spent paused (any priority).
    pub paused: Dur,
    /// Lossless packets admitted beyond the buffer (headroom too small).
    pub headroom_overflow: u64,
    /// Packets marked CE at this egress.
    pub ecn_marked: u64,
}

/// The counters of one (node, port, priority class); reported as they are, inside the run's
/// [`PortPrioReport`](crate::metrics::PortPrioReport) (`paused` as `paused_us`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrioCounters {
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// PFC frames sent (pause and resume) for this priority.
    pub pause_sent: u64,
    /// PFC frames received for this priority.
    pub pause_received: u64,
    /// Time this egress was paused, closed intervals (an open one is added when read);
    /// `paused_us` in reports.
    #[serde(rename = "paused_us", with = "micros")]
    pub paused: Dur,
    /// Frames dropped on arrival (buffer full, watchdog, unknown MAC, link loss).
    pub ingress_drops: u64,
    /// Frames dropped at the egress (a flooded copy for another server, a watchdog's drop, a
    /// link down).
    pub egress_drops: u64,
}

/// One row of the time series: what a (node, port, priority) did during an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MonitorRow {
    /// End of the interval, µs.
    pub t_us: f64,
    /// Node.
    pub node: u32,
    /// Port.
    pub port: u16,
    /// Priority.
    pub prio: u8,
    /// What moved during the interval (paused time included).
    pub delta: PrioCounters,
    /// Bytes queued at this egress (switch) or held in the receive buffer (NIC) at the end.
    pub queue_bytes: u64,
}

/// One fabric-wide point of the time series.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TimelinePoint {
    /// End of the interval, ms.
    pub t_ms: f64,
    /// Payload of the flows that completed during the interval, Gb/s.
    pub goodput_gbps: f64,
    /// PFC frames sent during the interval, per second.
    pub pause_rate: f64,
    /// Hosts whose data priority was paused for more than half of the interval.
    pub paused_hosts: u32,
    /// Frames dropped anywhere during the interval.
    pub drops: u64,
}

/// The monitor's state.
#[derive(Debug, Default)]
pub(super) struct Monitor {
    /// Counters are kept.
    pub(super) on: bool,
    /// Sampling interval (`None`: no time series).
    pub(super) interval: Option<Dur>,
    /// Per node, the index of its port 0, class 0.
    base: Vec<u32>,
    nclasses: usize,
    /// The class of the data priority (a host whose data class is paused counts as paused).
    data_class: usize,
    c: Vec<PrioCounters>,
    /// The counters at the previous sample (paused time with open intervals included).
    last: Vec<PrioCounters>,
    last_t: Time,
    /// Completed payload bytes since the previous sample.
    delivered: u64,
    pub(super) rows: Vec<MonitorRow>,
    pub(super) timeline: Vec<TimelinePoint>,
}

impl Monitor {
    pub(super) fn new(
        on: bool,
        interval: Option<Dur>,
        ports: &[usize],
        nclasses: usize,
        data_class: usize,
    ) -> Monitor {
        let mut base = Vec::with_capacity(ports.len());
        let mut n = 0u32;
        for &p in ports {
            base.push(n);
            if on {
                n += (p * nclasses) as u32;
            }
        }
        Monitor {
            on,
            interval,
            base,
            nclasses,
            data_class,
            c: vec![PrioCounters::default(); n as usize],
            last: vec![PrioCounters::default(); n as usize],
            ..Monitor::default()
        }
    }

    /// The counters of (`node`, `port`, class `c`); only call when `on`.
    #[inline]
    fn at(&mut self, node: u32, port: u16, c: usize) -> &mut PrioCounters {
        let i = self.base[node as usize] as usize + usize::from(port) * self.nclasses + c;
        &mut self.c[i]
    }

    /// The counters of (`node`, `port`, class `c`), read-only.
    pub(super) fn get(&self, node: u32, port: u16, c: usize) -> PrioCounters {
        let i = self.base[node as usize] as usize + usize::from(port) * self.nclasses + c;
        self.c[i]
    }

    /// A frame of class `c` left (`node`, `port`).
    #[inline]
    pub(super) fn tx(&mut self, node: u32, port: u16, c: usize, wire: u64) {
        if self.on {
            let pc = self.at(node, port, c);
            pc.tx_packets += 1;
            pc.tx_bytes += wire;
        }
    }

    /// A frame of class `c` arrived at (`node`, `port`).
    #[inline]
    pub(super) fn rx(&mut self, node: u32, port: u16, c: usize, wire: u64) {
        if self.on {
            let pc = self.at(node, port, c);
            pc.rx_packets += 1;
            pc.rx_bytes += wire;
        }
    }

    /// A frame of class `c` was dropped on arrival at (`node`, `port`).
    #[inline]
    pub(super) fn ingress_drop(&mut self, node: u32, port: u16, c: usize) {
        if self.on {
            self.at(node, port, c).ingress_drops += 1;
        }
    }

    /// A frame of class `c` was dropped at the egress (`node`, `port`).
    #[inline]
    pub(super) fn egress_drop(&mut self, node: u32, port: u16, c: usize) {
        if self.on {
            self.at(node, port, c).egress_drops += 1;
        }
    }

    /// (`node`, `port`) sent a PFC frame for class `c`.
    #[inline]
    pub(super) fn pause_sent(&mut self, node: u32, port: u16, c: usize) {
        if self.on {
            self.at(node, port, c).pause_sent += 1;
        }
    }

    /// (`node`, `port`) received a PFC frame for class `c` (`None`: a priority not in use).
    #[inline]
    pub(super) fn pause_received(&mut self, node: u32, port: u16, c: Option<usize>) {
        if let (true, Some(c)) = (self.on, c) {
            self.at(node, port, c).pause_received += 1;
        }
    }

    /// A pause of class `c` at the egress (`node`, `port`) ended after `d`.
    #[inline]
    pub(super) fn paused(&mut self, node: u32, port: u16, c: Option<usize>, d: Dur) {
        if let (true, Some(c)) = (self.on, c) {
            let pc = self.at(node, port, c);
            pc.paused = pc.paused + d;
        }
    }

    /// `bytes` of payload completed (goodput of the time series).
    pub(super) fn delivered(&mut self, bytes: u64) {
        self.delivered += bytes;
    }

    /// Closes the pause intervals still open at the end of the run: `open(node, port, c)`
    /// is how long (`node`, `port`, class `c`) has been paused without a resume.
    pub(super) fn close(
        &mut self,
        topo: &Topology,
        nclasses: usize,
        mut open: impl FnMut(u32, u16, usize) -> Dur,
    ) {
        if !self.on {
            return;
        }
        for node in 0..topo.nodes.len() as u32 {
            for port in 0..topo.nodes[node as usize].ports.len() as u16 {
                for c in 0..nclasses {
                    let o = open(node, port, c);
                    let pc = self.at(node, port, c);
                    pc.paused = pc.paused + o;
                }
            }
        }
    }

    /// Takes a sample at `now`: a row per (node, port, priority) that moved or holds bytes,
    /// and a fabric-wide point. `probe(node, port, c)` gives how long that egress has been
    /// paused without a resume, and the bytes it holds (queued at a switch egress, in the
    /// receive buffer at a NIC).
    pub(super) fn sample(
        &mut self,
        now: Time,
        topo: &Topology,
        classes: &Classes,
        mut probe: impl FnMut(u32, u16, usize) -> (Dur, u64),
    ) {
        if self.interval.is_none() {
            return;
        }
        let span = now - self.last_t;
        let t_us = now.as_picos() as f64 / 1e6;
        let nc = classes.len();
        let (mut pauses, mut drops, mut paused_hosts) = (0u64, 0u64, 0u32);
        for node in 0..topo.nodes.len() as u32 {
            let nports = topo.nodes[node as usize].ports.len();
            for port in 0..nports as u16 {
                for c in 0..nc {
                    let (open, queue_bytes) = probe(node, port, c);
                    let mut cur = self.get(node, port, c);
                    cur.paused = cur.paused + open;
                    let i = self.base[node as usize] as usize + usize::from(port) * nc + c;
                    let last = self.last[i];
                    let delta = PrioCounters {
                        tx_packets: cur.tx_packets - last.tx_packets,
                        tx_bytes: cur.tx_bytes - last.tx_bytes,
                        rx_packets: cur.rx_packets - last.rx_packets,
                        rx_bytes: cur.rx_bytes - last.rx_bytes,
                        pause_sent: cur.pause_sent - last.pause_sent,
                        pause_received: cur.pause_received - last.pause_received,
                        paused: Dur::from_picos(cur.paused.as_picos() - last.paused.as_picos()),
                        ingress_drops: cur.ingress_drops - last.ingress_drops,
                        egress_drops: cur.egress_drops - last.egress_drops,
                    };
                    self.last[i] = cur;
                    pauses += delta.pause_sent;
                    drops += delta.ingress_drops + delta.egress_drops;
                    if node < topo.hosts
                        && c == self.data_class
                        && delta.paused.as_picos() * 2 > span.as_picos()
                    {
                        paused_hosts += 1;
                    }
                    if delta != PrioCounters::default() || queue_bytes > 0 {
                        self.rows.push(MonitorRow {
                            t_us,
                            node,
                            port,
                            prio: classes.class_priority(c),
                            delta,
                            queue_bytes,
                        });
                    }
                }
            }
        }
        let secs = span.as_picos() as f64 / 1e12;
        let delivered = std::mem::take(&mut self.delivered);
        self.timeline.push(TimelinePoint {
            t_ms: t_us / 1000.0,
            goodput_gbps: if secs > 0.0 {
                delivered as f64 * 8.0 / secs / 1e9
            } else {
                0.0
            },
            pause_rate: if secs > 0.0 {
                pauses as f64 / secs
            } else {
                0.0
            },
            paused_hosts,
            drops,
        });
        self.last_t = now;
    }
}

/// A duration as a number of microseconds (`f64`), the unit of the reports.
mod micros {
    use irn_transport::Dur;

    pub(super) fn serialize<S: serde::Serializer>(d: &Dur, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_micros_f64())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        let us: f64 = serde::Deserialize::deserialize(d)?;
        if !(us.is_finite() && us >= 0.0) {
            return Err(serde::de::Error::custom(format!(
                "a duration in µs, not {us}"
            )));
        }
        Ok(Dur::from_micros_f64(us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_read_back_from_their_report_with_the_pause_in_microseconds() {
        let c = PrioCounters {
            tx_packets: 3,
            pause_sent: 2,
            paused: Dur::from_picos(1_500_000),
            egress_drops: 1,
            ..PrioCounters::default()
        };
        let json = serde_json::to_value(c).expect("serializes");
        assert_eq!(json["paused_us"], 1.5);
        assert!(json.get("paused").is_none());
        let back: PrioCounters = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, c);
        // A pause cannot be negative or not a number.
        for bad in ["-1.0", "null", "\"x\""] {
            let text = format!(
                r#"{{"tx_packets":0,"tx_bytes":0,"rx_packets":0,"rx_bytes":0,"pause_sent":0,
                "pause_received":0,"paused_us":{bad},"ingress_drops":0,"egress_drops":0}}"#
            );
            assert!(
                serde_json::from_str::<PrioCounters>(&text).is_err(),
                "{bad}"
            );
        }
    }
}
