//! NICs: the hosts' ports, which run irn-transport queue pairs.
//!
//! Sending: a NIC pulls packets from its queue pairs when its link is free (so it never
//! queues), serving the queue pairs with something to send round-robin, one packet each;
//! ACK/NAK/CNP travel at the control priority when configured and still leave while the data
//! priority is paused by PFC. Receiving: a frame reaches its queue pair on arrival, unless the
//! receive pipeline has a rate (`[nic] rx_gbps`, SPEC N6's slow receiver): then frames wait in
//! a receive buffer drained at that rate, which pauses the switch (lossless) or drops (lossy)
//! as a switch ingress does.

use super::flows::qpn;
use super::memory::SimMemory;
use super::packet::{Ev, Hop, Meta, Packet, FRAME_OVERHEAD, NIL, VLAN_TAG_LEN};
use super::pfc::Ingress;
use super::{Part, PortStats};
use crate::config::{us, Ecmp};
use irn_transport::rng::mix;
use irn_transport::{Dur, QueuePair, Time};
use std::collections::VecDeque;

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) qp: Option<QueuePair>,
    pub(super) gen: u32,
    /// Time of the timer event in the queue, if one is.
    pub(super) timer: Option<Time>,
    pub(super) ready: bool,
    pub(super) flow: u32,
    /// Which end of the flow: [`REQ`](super::flows::REQ) or [`RESP`](super::flows::RESP).
    pub(super) end: u8,
    /// The host of the queue pair at the other end (kept here: the slot is read for every
    /// packet sent, the flow's state is not).
    pub(super) peer: u32,
    /// Packets sent (packet spraying salts each packet's ECMP hash with it).
    pub(super) sent: u32,
    /// Flowlet number (`ecmp = "flowlet"`) and when the queue pair last sent.
    pub(super) flowlet: u32,
    pub(super) last_tx: Time,
}

#[derive(Debug)]
pub(super) struct Nic<M> {
    pub(super) mem: M,
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<u32>,
    pub(super) ready: VecDeque<u32>,
    pub(super) busy_until: Time,
    /// A `TxDone` event is pending.
    pub(super) wake: bool,
    pub(super) paused: [bool; 8],
    pub(super) paused_since: [Time; 8],
    pub(super) stats: PortStats,
    /// With a receive pipeline rate: frames in the receive buffer, in arrival order (the
    /// first is being processed).
    pub(super) rx: VecDeque<RxFrame>,
    /// The receive buffer's bytes per class, and the pauses the NIC has sent its switch.
    pub(super) rx_held: Ingress,
    /// Receive-pipeline time owed to reorder-buffer traffic over PCIe (T8(a)), charged to
    /// the next frame the pipeline starts.
    pub(super) rx_debt: Dur,
    /// No queue pair on `ready` has a control packet: the last look found none, and none has
    /// had an input (a packet or a timeout — the only things that make control packets)
    /// since. While the data priority is paused, looking again would only rotate the list.
    pub(super) ctrl_idle: bool,
    /// At most this many entries of `ready` name a destroyed queue pair (0: none).
    pub(super) dead_ready: u32,
    /// Per slot: its queue pair's [`QueuePair::control_ready`], as of its last input or
    /// poll (kept apart from the slots, which hold whole queue pairs, so that a paused NIC
    /// scans bytes, not queue pairs).
    pub(super) ctrl: Vec<bool>,
}

/// A frame in a NIC's receive buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct RxFrame {
    pub(super) pkt: u32,
    pub(super) hop: Hop,
    pub(super) class: u8,
}

impl<M: SimMemory> Part<M> {
    /// Lets a NIC send now if its link is free, or once it is.
    pub(super) fn kick_nic(&mut self, now: Time, host: u32) {
        let nic = &mut self.nics[host as usize];
        if nic.wake {
            return;
        }
        if now >= nic.busy_until {
            self.nic_send(now, host);
        } else {
            nic.wake = true;
            self.q.push(
                nic.busy_until,
                Ev::TxDone {
                    node: host,
                    port: 0,
                },
            );
        }
    }

    pub(super) fn nic_send(&mut self, now: Time, host: u32) {
        let data_paused = self.nics[host as usize].paused[self.data_prio as usize];
        let ctrl_paused = self.nics[host as usize].paused[self.ctrl_prio as usize];
        let separate = self.ctrl_prio != self.data_prio;
        let nic = &mut self.nics[host as usize];
        if now < nic.busy_until {
            return;
        }
        // With the data priority paused, a look at the list sends a control packet or does
        // nothing but rotate it once round (the same order again) and drop the destroyed queue
        // pairs from it. When it can send nothing — control paused too, or sharing the data
        // priority, or no queue pair with a control packet — do only the dropping, and only if
        // there is any: a NIC paused for long with thousands of queue pairs on its list would
        // otherwise spend its time asking each of them, every time it may send.
        if data_paused && (!separate || ctrl_paused || nic.ctrl_idle) {
            if nic.dead_ready > 0 {
                let slots = &mut nic.slots;
                nic.ready.retain(|&slot| {
                    let s = &mut slots[slot as usize];
                    let live = s.qp.is_some();
                    if !live {
                        s.ready = false;
                    }
                    live
                });
                nic.dead_ready = 0;
            }
            return;
        }
        let mut tries = nic.ready.len();
        if data_paused && nic.dead_ready == 0 {
            // Only a control packet can go, and the loop below would pass every queue pair
            // before the first that has one to the back of the list, in order: rotate there
            // at once (the flags say where, without touching a queue pair).
            let ctrl = &nic.ctrl;
            match nic.ready.iter().position(|&slot| ctrl[slot as usize]) {
                Some(pos) => {
                    nic.ready.rotate_left(pos);
                    tries -= pos;
                }
                None => {
                    nic.ctrl_idle = true;
                    return;
                }
            }
        }
        while tries > 0 {
            tries -= 1;
            let Some(slot) = nic.ready.pop_front() else {
                break;
            };
            let s = &mut nic.slots[slot as usize];
            let Some(qp) = s.qp.as_mut() else {
                s.ready = false;
                continue;
            };
            let t = if !(data_paused || separate && ctrl_paused && qp.has_control()) {
                qp.poll_transmit(now, &nic.mem, &mut self.buf)
            } else if separate && !ctrl_paused {
                // Exactly when it would answer.
                if nic.ctrl[slot as usize] {
                    qp.poll_control(&nic.mem, &mut self.buf)
                } else {
                    None
                }
            } else {
                None
            };
            let Some(t) = t else {
                if data_paused || ctrl_paused {
                    // It may still have data once the pause ends.
                    nic.ready.push_back(slot);
                } else {
                    s.ready = false;
                }
                continue;
            };
            nic.ctrl[slot as usize] = qp.control_ready();
            // Round-robin: back of the list if it may have more; otherwise out of it (a
            // receiver that just sent its ACK usually has nothing more) until an input
            // gives it something, so that the NIC does not wake up for it.
            if qp.may_transmit() {
                nic.ready.push_back(slot);
            } else {
                s.ready = false;
            }
            self.max_in_flight = self
                .max_in_flight
                .max(qp.in_flight())
                .max(qp.responses_in_flight());
            // Sending may have started the retransmission timer.
            Self::arm_timer(&mut self.q, now, s, host, slot);
            let dest_qpn = t.ib.bth.dest_qpn;
            let peer_host = s.peer;
            let (flow, end) = (s.flow, usize::from(s.end));
            let control = t.ib.bth.opcode.is_control();
            let (dscp, prio) = if control {
                (self.ctrl_dscp, self.ctrl_prio)
            } else {
                (self.data_dscp, self.data_prio)
            };
            // A tagged frame carries the priority of its DSCP as its PCP (IEEE 802.1Q).
            let pcp = self.vlan.then_some(prio);
            let tag = if pcp.is_some() { VLAN_TAG_LEN } else { 0 };
            // At most a 4096-byte MTU (validated) plus headers: it fits.
            let extra = self.extra_headers[usize::from(control)];
            let wire = u16::try_from(t.ib.buffer_len() as u32 + FRAME_OVERHEAD + tag + extra)
                .unwrap_or(u16::MAX);
            let flow_hash = mix((u64::from(host) << 40)
                ^ (u64::from(peer_host) << 20)
                ^ u64::from(dest_qpn)
                ^ (u64::from(qpn(flow, end)) << 48));
            // ECMP granularity: the flow's hash, or salted per packet (spraying) or per
            // flowlet, so each switch's pick changes with it.
            let salt = match self.cfg.network.ecmp {
                Ecmp::Flow => None,
                Ecmp::Packet => Some(s.sent),
                Ecmp::Flowlet => {
                    if s.sent > 0 && now.since(s.last_tx) > us(self.cfg.network.flowlet_gap_us) {
                        s.flowlet += 1;
                    }
                    Some(s.flowlet)
                }
            };
            s.sent = s.sent.wrapping_add(1);
            s.last_tx = now;
            let hash = match salt {
                None => flow_hash as u32,
                Some(k) => mix(flow_hash ^ (u64::from(k) << 32) ^ 0x5eed) as u32,
            };
            let payload = if M::HOLDS_BYTES {
                std::mem::take(&mut self.buf)
            } else {
                Vec::new()
            };
            // The QP may have written bytes into `buf` even when the memory holds none: keep
            // the allocation for next time.
            let hop = Hop::new(peer_host, hash, wire, dscp, t.ecn, pcp);
            let p = Packet {
                ib: t.ib,
                flow,
                to: (1 - end) as u8,
            };
            let pkt = self.alloc_packet(p, payload, Meta { hop, next: NIL });
            if self.mon.on {
                let pc = self.mon.at(host, 0, self.classes.class(prio));
                pc.tx_packets += 1;
                pc.tx_bytes += u64::from(wire);
            }
            let nic = &mut self.nics[host as usize];
            nic.stats.tx_packets += 1;
            nic.stats.tx_bytes += u64::from(wire);
            // Look again when the link is free if some queue pair may have more; otherwise
            // the next one to become ready kicks the NIC.
            let more = !nic.ready.is_empty();
            let done = self.put_on_link(now, host, 0, pkt, hop, more);
            let nic = &mut self.nics[host as usize];
            nic.busy_until = done;
            nic.wake = more;
            return;
        }
        // A whole round without a packet: every destroyed queue pair has left the list, and
        // while data is paused, none has a control packet either.
        let nic = &mut self.nics[host as usize];
        nic.dead_ready = 0;
        if data_paused {
            nic.ctrl_idle = true;
        }
    }

    pub(super) fn nic_receive(&mut self, now: Time, host: u32, pkt: u32, hop: Hop) {
        let ecn = hop.ecn();
        if self.mon.on {
            let pc = self
                .mon
                .at(host, 0, self.classes.class(self.classes.priority(&hop)));
            pc.rx_packets += 1;
            pc.rx_bytes += u64::from(hop.wire);
        }
        let p = &self.packets[pkt as usize];
        let slot = self.states[p.flow as usize].slot[usize::from(p.to)];
        let payload = if M::HOLDS_BYTES {
            &self.payloads[pkt as usize][..]
        } else {
            &[]
        };
        let nic = &mut self.nics[host as usize];
        // NIL (the end is gone, or not set up yet) finds no slot.
        let live = nic.slots.get_mut(slot as usize).and_then(|s| s.qp.as_mut());
        match live {
            Some(qp) => {
                nic.ctrl_idle = false;
                let parked = qp.counters().reorder_bytes;
                qp.handle_packet(now, &p.ib, payload, ecn, &mut nic.mem);
                let parked = qp.counters().reorder_bytes - parked;
                if parked > 0 && self.rx_rate.is_some() {
                    // Written to host memory, and read back before it is placed (seed 002).
                    let pcie = (self.cfg.nic.pcie_gbps * 1e9).round() as u64;
                    nic.rx_debt = nic.rx_debt + Dur::transmission(2 * parked, pcie);
                }
            }
            None => {
                // A straggler for a queue pair already destroyed.
                self.free_packet(pkt);
                return;
            }
        }
        self.free_packet(pkt);
        self.touch(now, host, slot);
    }

    /// A frame reaches a NIC whose receive pipeline has a rate: it waits in the receive
    /// buffer (or is dropped, lossy and the buffer full), and the NIC pauses its switch when
    /// a lossless class's share passes the threshold.
    pub(super) fn nic_buffer(&mut self, now: Time, host: u32, pkt: u32, hop: Hop) {
        let c = self.classes.class(self.classes.priority(&hop));
        // A NIC whose watchdog fired no longer pauses: every class is lossy to it.
        let (prio, lossless) = (
            self.classes.class_priority(c),
            self.classes.class_lossless(c) && !self.safety.nic_pfc_off[host as usize],
        );
        let wire = u64::from(hop.wire);
        let nic = &mut self.nics[host as usize];
        if nic.rx_held.total() + wire > self.cfg.nic.rx_buffer_bytes {
            if lossless && nic.rx_held.total() + wire <= 2 * self.cfg.nic.rx_buffer_bytes {
                nic.stats.headroom_overflow += 1;
            } else {
                // Lossy, or lossless frames the peer sent through a pause (a switch
                // watchdog's `forward`) beyond any headroom: the buffer is finite.
                if lossless {
                    nic.stats.headroom_overflow += 1;
                }
                if self.mon.on {
                    self.mon.at(host, 0, c).ingress_drops += 1;
                }
                self.drop_packet(host, 0, pkt);
                return;
            }
        }
        nic.rx_held.add(c, wire);
        nic.rx.push_back(RxFrame {
            pkt,
            hop,
            class: c as u8,
        });
        if nic.rx.len() == 1 {
            // The pipeline was idle until now: no stall so far.
            self.safety.rx_progress[host as usize] = now;
            self.nic_rx_start(now, host);
        }
        let nic = &mut self.nics[host as usize];
        if lossless && nic.rx_held.pause_above(c, self.nic_xoff[host as usize]) {
            self.send_pfc(now, host, 0, prio, true);
        }
    }

    /// Starts processing the first frame of `host`'s receive buffer: its time at the
    /// pipeline's rate, plus what the pipeline owes (reorder-buffer PCIe traffic) and a
    /// translation-cache miss's stall. A stopped pipeline (a fault) starts nothing.
    pub(super) fn nic_rx_start(&mut self, now: Time, host: u32) {
        if self.safety.rx_stalled[host as usize] {
            return;
        }
        let stall = self.mtt_stall(host);
        let nic = &mut self.nics[host as usize];
        if let Some(f) = nic.rx.front() {
            let debt = std::mem::replace(&mut nic.rx_debt, Dur::ZERO);
            let work = self.rx_rate.map_or(Dur::ZERO, |rate| {
                Dur::transmission(u64::from(f.hop.wire), rate)
            });
            self.q.push(now + work + debt + stall, Ev::RxDone { host });
        }
    }

    /// The receive pipeline is done with its first frame: the queue pair gets it.
    pub(super) fn nic_rx_done(&mut self, now: Time, host: u32) {
        let nic = &mut self.nics[host as usize];
        let Some(f) = nic.rx.pop_front() else {
            return;
        };
        let c = usize::from(f.class);
        nic.rx_held.remove(c, u64::from(f.hop.wire));
        self.safety.rx_progress[host as usize] = now;
        let gap = self.cfg.switch.pfc_resume_gap_bytes;
        if nic
            .rx_held
            .resume_below(c, self.nic_xoff[host as usize], gap)
        {
            let prio = self.classes.class_priority(c);
            self.send_pfc(now, host, 0, prio, false);
        }
        self.nic_rx_start(now, host);
        self.nic_receive(now, host, f.pkt, f.hop);
    }
}
