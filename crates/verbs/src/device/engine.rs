//! The device's engine: transmit turns of the queue pairs (built in place, sent in one
//! `sendmmsg`), impairment and capture on the way out, delivery of received packets to their
//! queue pairs, timers, and the engine thread that receives bursts and runs them. Everything
//! here runs with the device's [`Core`] locked.

use super::group::Forward;
use super::lent::Gathered;
use super::tx::TxPacket;
use super::*;
use irn_transport::TxPayload;

use crate::impair::{Out, Outbound};

impl Core {
    /// Moves the completions of queue pair `qpn` to their CQs (which wake their sleepers,
    /// [`push_wc`]).
    pub(super) fn drain_completions(&mut self, qpn: u32) {
        let Some(e) = self.objects.qps.get_mut(&qpn) else {
            return self.drain_ud(qpn);
        };
        while let Some(wc) = e.qp.poll_completion() {
            let to = match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => e.recv_cq,
                _ => e.send_cq,
            };
            push_wc(&mut self.objects.cqs, to, wc);
        }
    }

    /// Gives queue pair `qpn` a turn: up to [`TX_BURST`] packets, built into the transmit
    /// batch, which leaves when the caller's work is done ([`Shared::flush`]: a verb's, or a
    /// whole received burst's — so the ACKs a burst provokes go out together). Returns whether
    /// it may have more (then it is pending in [`Core::turns`]), or waits for the in-flight budget
    /// while the budget has room (then the engine should run).
    pub(super) fn transmit(&mut self, sock: &UdpSocket, now: Time, qpn: u32) -> bool {
        self.transmit_turn(sock, now, qpn, false)
    }

    /// A transmit turn ([`Core::transmit`]); `granted`: the turn of the queue pair at the
    /// front of the budget's queue, which may start new packets while others wait behind it.
    fn transmit_turn(&mut self, sock: &UdpSocket, now: Time, qpn: u32, granted: bool) -> bool {
        if !self.objects.qps.contains_key(&qpn) {
            return self.transmit_ud(sock, now, qpn);
        }
        if self.held_by_pause(now, qpn) {
            // Its timers still run (a timeout just fired may have set a new deadline).
            self.rearm(qpn);
            return false;
        }
        let mut payload = std::mem::take(&mut self.payload);
        let mut t = Transmit::SLOT;
        let mut budget = TX_BURST;
        let mut more = false;
        self.recharge(qpn);
        let mut hold = !self.budget.may_start(granted);
        // The line was booked while the queue pair had something to send: it waits for it.
        let mut line_waits = false;
        self.tx.coalescing = self.objects.qps.get(&qpn).is_some_and(|e| e.gso);
        while let Some(e) = self.objects.qps.get_mut(&qpn) {
            if budget == 0 {
                more = true;
                break;
            }
            if self.line.as_deref().is_some_and(|l| l.busy(now)) {
                line_waits = e.qp.may_transmit();
                break;
            }
            budget -= 1;
            e.qp.hold_new_requests(hold);
            let (Some(peer), Some(pd)) = (e.remote, self.objects.pds.get(&e.pd)) else {
                break;
            };
            if !e.qp.poll_transmit_into(now, &pd.mem, &mut payload, &mut t) {
                break;
            }
            let sport = e.sport;
            let dscp = e.dscp;
            let op = t.ib.bth.opcode;
            if !hold && op.is_request() {
                self.recharge(qpn);
                hold = self.budget.full();
                // A standard responder acknowledges only packets that ask (AckReq: a
                // message's last, every 64th). A queue pair that may now wait — held by the
                // budget, its turn over, or the line booked by this packet — asks with its
                // last packet, or what it has in flight would stay unacknowledged, and
                // charged, until its timer fired.
                let fills = self
                    .line
                    .as_deref()
                    .is_some_and(|l| l.fills(t.ib.buffer_len() + line::IP_UDP_ICRC_LEN, now));
                if (hold || budget == 0 || fills) && (op.is_write() || op.is_send()) {
                    t.ib.bth.ack_req = true;
                }
            }
            self.queue_tx(sock, now, (peer, sport, dscp), &t, &mut payload);
        }
        // A packet may have ended the connection (a fault found while building it).
        self.recharge(qpn);
        self.tx.coalescing = false;
        // No lent piece outlives the turn (`lent`): a packet that was not queued left its own.
        payload.clear();
        self.payload = payload;
        self.turns.set_pending(qpn, more);
        let line_held = line_waits.then(|| self.held_by_line(now, qpn)).flatten();
        let mut waits = false;
        if let Some(e) = self.objects.qps.get_mut(&qpn) {
            if hold && !more && e.qp.new_request_ready() {
                self.counters.tx_budget_holds += 1;
                waits = true;
                if !e.waiting {
                    e.waiting = true;
                    self.budget.wait(qpn);
                }
            }
        }
        // Every input a queue pair takes (a post, a modify, a packet, a timeout) is followed by
        // its turn here, so this is where its deadline is read again.
        self.rearm(qpn);
        more || line_held == Some(true) || (waits && self.budget.has_room())
    }

    /// Whether a link-level pause of queue pair `qpn`'s priority holds its turn back: it then
    /// waits, no longer pending, for the pause to end ([`Core::release_paused`]).
    fn held_by_pause(&mut self, now: Time, qpn: u32) -> bool {
        let Some(p) = self.pause.as_deref_mut() else {
            return false;
        };
        let prio = self.objects.qps.get(&qpn).map_or(0, |e| e.dscp >> 3);
        if !p.paused(prio, now) {
            return false;
        }
        p.waiting.insert(qpn);
        p.held_turns += 1;
        self.turns.set_pending(qpn, false);
        true
    }

    /// Whether the line is booked too far ahead for queue pair `qpn`'s turn (`line.rs`): it
    /// then waits in the line's queue, no longer pending ([`Core::serve_line`]). `Some(first)`
    /// when held, `first` if no queue pair waited before it.
    pub(super) fn held_by_line(&mut self, now: Time, qpn: u32) -> Option<bool> {
        let l = self.line.as_deref_mut().filter(|l| l.busy(now))?;
        let first = l.wait(qpn);
        self.turns.set_pending(qpn, false);
        Some(first)
    }

    /// Whether the line is booked too far ahead of `now` to take a frame.
    pub(super) fn line_busy(&self, now: Time) -> bool {
        self.line.as_deref().is_some_and(|l| l.busy(now))
    }

    /// Gives the queue pairs waiting for the line their turns, first come first served, as
    /// long as it takes frames: one the line holds again goes to the back.
    pub(super) fn serve_line(&mut self, sock: &UdpSocket, now: Time) {
        while let Some(qpn) = self.line.as_deref_mut().and_then(|l| l.next_ready(now)) {
            // Gone meanwhile: skipped.
            if !self.objects.qps.contains_key(&qpn) && !self.objects.uds.contains_key(&qpn) {
                continue;
            }
            self.transmit(sock, now, qpn);
            self.drain_completions(qpn);
        }
    }

    /// When the line takes frames again, if a queue pair waits for it.
    pub(super) fn next_line_release(&self) -> Option<Time> {
        self.line.as_deref().and_then(line::Line::next_release)
    }

    /// Reads the pause frames that arrived (`sock`), and gives the queue pairs a pause held
    /// their turns back again once it no longer holds them.
    pub(super) fn release_paused(&mut self, sock: Option<&crate::packet::PacketSocket>, now: Time) {
        let Some(p) = self.pause.as_deref_mut() else {
            return;
        };
        if let Some(sock) = sock {
            let mut buf = [0u8; 128];
            while let Ok(Some(n)) = sock.try_recv(&mut buf) {
                let frame = buf
                    .get(14..n)
                    .and_then(|b| irn_wire::mac_control::MacControl::new_checked(b).ok())
                    .and_then(|v| irn_wire::mac_control::MacControlRepr::parse(&v).ok());
                if let Some(f) = frame {
                    p.frame(&f, now);
                }
            }
        }
        let waiting: Vec<u32> = p.waiting.iter().copied().collect();
        for qpn in waiting {
            let prio = self.objects.qps.get(&qpn).map_or(0, |e| e.dscp >> 3);
            let p = self.pause.as_deref_mut().expect("pause state");
            if !p.paused(prio, now) {
                p.waiting.remove(&qpn);
                if self.objects.qps.contains_key(&qpn) {
                    self.turns.set_pending(qpn, true);
                }
            }
        }
    }

    /// When a pause holding queue pairs back next runs out, if one does.
    pub(super) fn next_pause_release(&self, now: Time) -> Option<Time> {
        self.pause.as_deref().and_then(|p| p.next_release(now))
    }

    /// Gives the queue pairs waiting for the in-flight budget their turns, first come first
    /// served, while it has room.
    pub(super) fn serve_budget_queue(&mut self, sock: &UdpSocket, now: Time) {
        // A booked line would take the queue pairs out of the budget's order into its own:
        // they keep their places until it takes frames.
        while !self.line_busy(now) {
            let Some(qpn) = self.budget.next_waiting() else {
                break;
            };
            // Gone meanwhile: skipped.
            let Some(e) = self.objects.qps.get_mut(&qpn) else {
                continue;
            };
            e.waiting = false;
            self.transmit_turn(sock, now, qpn, true);
            self.drain_completions(qpn);
        }
    }

    /// Counts queue pair `qpn`'s bytes in flight (its request PSNs and IRN read responses
    /// not yet acknowledged, in packets of its path MTU) anew in the device's total —
    /// nothing once in error or reset, nor while it waits out an RNR NAK: its peer refused
    /// what it sent, and a queue pair whose peer posts no receives (with `rnr_retry` 7, for
    /// ever) would otherwise hold the budget of every other.
    fn recharge(&mut self, qpn: u32) {
        let Some(e) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        let now = match e.qp.state() {
            QpState::Reset | QpState::Err => 0,
            _ if e.qp.rnr_waiting() => 0,
            _ => {
                u64::from(e.qp.in_flight() + e.qp.responses_in_flight())
                    * u64::from(e.qp.attr().path_mtu)
            }
        };
        let used = self.budget.recharge(e.charged, now);
        e.charged = now;
        self.counters.peak_in_flight_bytes = self.counters.peak_in_flight_bytes.max(used);
    }

    /// Arms queue pair `qpn`'s timer with its current deadline if that changed.
    pub(super) fn rearm(&mut self, qpn: u32) {
        if let Some(e) = self.objects.qps.get_mut(&qpn) {
            let t = e.qp.poll_timeout();
            if t != e.armed {
                e.armed = t;
                if let Some(t) = t {
                    self.turns.arm(qpn, t);
                }
            }
        }
    }

    /// The earliest deadline a queue pair is armed with.
    pub(super) fn next_deadline(&mut self) -> Option<Time> {
        let qps = &self.objects.qps;
        self.turns.next_deadline(|t, qpn| armed_at(qps, qpn, t))
    }

    /// Builds packet `t` from UDP source port `sport` to `peer` in the next slot of the
    /// transmit batch (captured there), or passes it through the send impairment — a loss-only
    /// impairment drops it here, before the batch, so that the survivors still coalesce. In a
    /// turn that may coalesce (`TxState::coalescing`) a packet joins the batch's last message when
    /// it goes to the same peer from the same port with the same ECN marking and is no longer
    /// than that message's first packet (a shorter one closes the message, as UDP GSO cuts
    /// every segment but the last to one size); its IPv4 identification, which the ICRC covers,
    /// is then its index in the message — the one the kernel's segmentation gives it
    /// ([`net::TxMsg`]).
    pub(super) fn queue_tx(
        &mut self,
        sock: &UdpSocket,
        now: Time,
        (peer, sport, dscp): (SocketAddr, u16, u8),
        t: &Transmit,
        payload: &mut Gathered,
    ) {
        if self.tx.cur.is_full() {
            self.flush_tx(sock);
        }
        let mut t = *t;
        if t.ecn != Ecn::NotEct && self.impairer.mark_ce() {
            t.ecn = Ecn::Ce;
        }
        let slot = self.tx.cur.batch.len();
        let src = SocketAddr::new(self.local.ip(), sport);
        let Some((ip, udp)) = net::headers(src, peer, dscp, t.ecn) else {
            return;
        };
        let mut repr = RoceRepr { ip, udp, ib: t.ib };
        let len = repr.buffer_len();
        // On the line from now, whatever becomes of it further on (a loss impairment is a
        // lossy link: the frame was sent).
        if let Some(l) = self.line.as_deref_mut() {
            l.send(len, now);
        }
        let hdr = ip.header_len() + UDP_LEN;
        let datagram = len - hdr;
        // Loss alone is drawn here, before the batch, so that what survives may coalesce;
        // duplication, reordering and delay go through `impair` packet by packet.
        let tx_imp = *self.impairer.tx();
        let only_drops = tx_imp.is_active() && tx_imp.only_drops();
        if only_drops && self.impairer.drops_tx() {
            self.counters.tx_impaired_drops += 1;
            return;
        }
        // A tagging device sends packet by packet (`device/tagged.rs`): no GSO message, whose
        // untagged fallback would need the UDP checksum the tagged path does without.
        let coalesce =
            self.tx.coalescing && self.tx.tagged.is_none() && (!tx_imp.is_active() || only_drops);
        // The index this packet takes in the batch's last message, if it joins it: that
        // message may take more while its packets so far are all of its first one's length.
        let last_len = self.tx.cur.batch.last().map(TxPacket::datagram_len);
        let joins = self.tx.cur.msgs.last().filter(|m| {
            coalesce
                && m.coalesce
                && last_len == Some(usize::from(m.seg_len))
                && m.dest == peer
                && m.sport == sport
                && m.dest_qpn == t.ib.bth.dest_qpn
                && m.tos == net::tos(dscp, t.ecn)
                && m.count < net::GSO_MAX_SEGMENTS
                && (m.count + 1) * usize::from(m.seg_len) <= net::GSO_MAX_BYTES
                && datagram <= usize::from(m.seg_len)
        });
        let joins = joins.map(|m| m.count);
        if let (Some(k), IpRepr::V4(v4)) = (joins, &mut repr.ip) {
            v4.ident = k as u16;
        }
        let buf = &mut self.tx.cur.buf[slot * SLOT..(slot + 1) * SLOT];
        // The headers, and the payload too unless the queue pair lent it: then the trailer
        // (pad, ICRC over the pieces) follows the headers in the slot (`lent`).
        let (head, tail) = match payload.bytes() {
            Some(bytes) => match buf.get_mut(..len).map(|b| repr.emit(b, bytes)) {
                Some(Ok(_)) => (len, 0),
                _ => return,
            },
            None => match payload.with_lent(|pieces| repr.emit_gather(buf, pieces)) {
                Ok(ht) => ht,
                Err(_) => return,
            },
        };
        let whole =
            (self.capture.is_some() || (tx_imp.is_active() && !only_drops)).then(|| match payload
                .bytes()
            {
                Some(_) => buf[..len].to_vec(),
                None => [&buf[..head], &payload.to_vec()[..], &buf[head..head + tail]].concat(),
            });
        if tx_imp.is_active() && !only_drops {
            let out = Outbound {
                peer,
                sport,
                tos: net::tos(dscp, t.ecn),
                hdr,
            };
            impair(self, sock, now, Some(out), &whole.unwrap_or_default());
            return;
        }
        if let (Some(c), Some(w)) = (self.capture.as_mut(), whole) {
            c.write(&w);
        }
        let first_lent = self.tx.cur.lent.len();
        payload.take_lent(&mut self.tx.cur.lent);
        self.counters.tx_lent += u64::from(self.tx.cur.lent.len() > first_lent);
        self.tx.cur.batch.push(TxPacket {
            slot,
            hdr,
            head,
            lent: first_lent..self.tx.cur.lent.len(),
            tail,
            len,
        });
        match (joins, self.tx.cur.msgs.last_mut()) {
            (Some(_), Some(m)) => m.count += 1,
            _ => self.tx.cur.msgs.push(net::TxMsg {
                dest: peer,
                sport,
                first: slot,
                count: 1,
                seg_len: datagram as u16,
                tos: net::tos(dscp, t.ecn),
                coalesce,
                dest_qpn: t.ib.bth.dest_qpn,
            }),
        }
    }

    /// Packets built and not yet sent.
    pub(super) fn tx_waiting(&self) -> bool {
        self.tx.waiting()
    }

    /// A post's packets wait in the transmit batch, as a NIC's work requests wait for the
    /// doorbell: one `sendmmsg` per post was half a 64-byte Send stream's cycles
    /// (docs/BENCHMARKS.md), and posts that follow each other now leave together. They leave
    /// with the next poll of or wait on one of the device's completion queues, when the batch
    /// is full, or with the engine's next wake-up: returns `true` for the first post of a
    /// batch, whose caller wakes the engine so that packets never wait for a poll that may
    /// not come.
    pub(super) fn ring_doorbell(&mut self) -> bool {
        if !self.tx.waiting() || self.tx.doorbell {
            return false;
        }
        self.tx.doorbell = true;
        true
    }

    /// A segment of a coalesced datagram, its UDP payload `datagram` from `from` with ECN
    /// field `ecn` and IPv4 identification `k` (the kernel numbered a GSO message's segments
    /// from the message's: [`net::Rx::segment`], [`Core::receive_coalesced`]). Where nothing
    /// needs its IP header — no capture, no receive impairment, a connected queue pair's — it
    /// is processed where it lies, its ICRC verified there if the device verifies (the raw
    /// path, IPv6); otherwise the packet is rebuilt first.
    pub(super) fn receive_segment(
        &mut self,
        sock: &UdpSocket,
        now: Time,
        seg: (SocketAddr, Ecn, u16),
        datagram: &[u8],
    ) {
        self.receive_segment_checked(sock, now, seg, datagram, self.rx.verifies_icrc());
    }

    /// [`Core::receive_segment`], its ICRC verified only if `verify` (the raw path verified a
    /// coalesced datagram's first segment as it found the cut).
    fn receive_segment_checked(
        &mut self,
        sock: &UdpSocket,
        now: Time,
        (from, ecn, k): (SocketAddr, Ecn, u16),
        datagram: &[u8],
        verify: bool,
    ) {
        let qpn = datagram
            .get(5..8)
            .map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]]));
        // A UD queue pair's receive needs the IP header, and so does a packet handed to the
        // group member that owns its queue pair (`group.rs`).
        let headers_needed = self.capture.is_some()
            || self.impairer.rx().is_active()
            || qpn.is_some_and(|q| {
                self.objects.uds.contains_key(&q)
                    || self.member.as_deref().is_some_and(|m| m.foreign(q))
            });
        if headers_needed {
            let mut scratch = self.rx.take_scratch();
            match net::with_headers(&mut scratch, from, self.local, ecn, k, datagram) {
                Some(p) if self.impairer.rx().is_active() => impair(self, sock, now, None, p),
                Some(p) => self.receive_checked(now, p, verify),
                None => {
                    self.counters.rx_packets += 1;
                    self.counters.rx_malformed += 1;
                }
            }
            self.rx.put_scratch(scratch);
            return;
        }
        self.counters.rx_packets += 1;
        let Some(body) = datagram.len().checked_sub(irn_wire::ICRC_LEN) else {
            self.counters.rx_malformed += 1;
            return;
        };
        if verify {
            let checked = match self.rx.segment_headers(from, self.local, ecn) {
                Some(hdrs) => hdrs.verify(k, datagram),
                None => Err(Reject::Malformed),
            };
            if let Err(r) = checked {
                self.count_reject(r);
                return;
            }
        }
        self.counters.rx_bytes += datagram.len() as u64;
        self.deliver(now, from, ecn, &datagram[..body], None);
    }

    /// Counts a received packet dropped for `why`.
    fn count_reject(&mut self, why: Reject) {
        match why {
            Reject::Malformed => self.counters.rx_malformed += 1,
            Reject::Icrc => self.counters.rx_icrc_errors += 1,
        }
    }

    /// A packet from the raw path, which may be a peer's UDP GSO message that reached this
    /// host's raw socket whole (loopback, veths: only the UDP path is told the segment size).
    /// A message's packets are all of one length but the last, and each starts with a BTH, so
    /// the cut is found: first at the first packet's headers + its queue pair's path MTU + the
    /// ICRC (a stream of large Writes, Sends, Read responses), then at every shorter length
    /// a packet can have (a multiple of 4 from its headers and ICRC on); a length is taken when
    /// a BTH with the first one's P_Key, for the first packet's queue pair or another of this
    /// device's (or of another member of its group, `group.rs`), starts where each later packet
    /// would, and the first packet's ICRC holds under it. Each segment is then received under the IPv4 identification the kernel would have
    /// given it (the first's + its index). A datagram no longer than one packet can be is
    /// taken as one when its ICRC holds, which is checked first.
    ///
    /// Returns the packets it received (a datagram taken whole counts one), or 0 for what is
    /// left to [`Core::receive`]: not a UDP datagram with at least an ICRC, or no BTH at its
    /// start; a single
    /// packet while the receive impairment is on (which takes it there); one that could be a
    /// single packet and that no cut fits (its ICRC is counted bad there).
    ///
    /// A datagram longer than any one packet that no cut fits is captured, counted in
    /// `rx_oversized` and `rx_malformed`, and dropped whole. A wrong length almost always
    /// fails at the second BTH (payload bytes there), and the ICRC, over the first packet
    /// only, decides the rest (a wrong length passing both: 2^-32 per candidate, and then its
    /// segments fail their own ICRCs). The search has a budget, against forged datagrams that
    /// repeat a P_Key and a queue pair's number everywhere: 2 048 + one per 4 bytes lookups,
    /// and 16 ICRCs.
    pub(super) fn receive_coalesced(
        &mut self,
        sock: &UdpSocket,
        now: Time,
        packet: &[u8],
    ) -> usize {
        let Ok(net::Received {
            from,
            ecn,
            ident,
            datagram: payload,
            ..
        }) = net::split(packet, false)
        else {
            return 0;
        };
        let qpn = |at: usize| {
            payload
                .get(at + 5..at + 8)
                .map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]]))
        };
        let Some(q0) = qpn(0) else {
            return 0;
        };
        // The first packet's queue pair bounds its payload; one this device does not have
        // (destroyed, or never) is bounded by the largest MTU, and its packets are counted as
        // for an unknown queue pair one by one.
        let mtu = self
            .objects
            .qps
            .get(&q0)
            .map_or(4096, |e| e.qp.attr().path_mtu as usize);
        let pkey = payload.get(2..4);
        let Ok(h) = IbRepr::header_len_of(payload) else {
            return 0;
        };
        // The first packet's headers and ICRC, and the most it can be with its payload.
        let h = h + irn_wire::ICRC_LEN;
        let full = h + mtu;
        let len = payload.len();
        let single = len <= full;
        if single && irn_wire::icrc::check_ip_packet(packet).is_ok_and(|c| c.ok()) {
            // One packet (the receive impairment, if any, takes it on the normal path).
            if self.impairer.rx().is_active() {
                return 0;
            }
            self.receive_checked(now, packet, false);
            return 1;
        }
        let Some(mut hdrs) = self.rx.segment_headers(from, self.local, ecn).copied() else {
            return 0;
        };
        // A length fits when a BTH for one of this device's queue pairs starts every `seg`
        // bytes after the first, the last piece holds at least a BTH and an ICRC, and the
        // first packet's ICRC holds. The search has a budget of queue-pair lookups and
        // ICRCs: an honest message needs one lookup per shorter length tried (the second
        // BTH's queue pair number is payload bytes there) and one per packet at its own; a
        // forged datagram whose bytes repeat a queue pair's number could make many lengths
        // look right as far as their last piece.
        //
        // A member of a group (`group.rs`) that finds no cut so searches again, taking a BTH
        // for another member's queue pair too — a datagram mixing members' queue pairs (an
        // older peer's GSO message) reaches the member of its first packet — where the BTH's
        // reserved bits are clear and its TVer one irn sends (0, 1 or 2): most numbers are some
        // other member's, and payload bytes should not pass for them where this device's own
        // queue pairs' packets do not mix
        // (`groups.rs::payload_bytes_do_not_pass_for_another_members_packets`).
        let mut cut = None;
        let foreign = self.member.as_deref();
        for others in [None, foreign] {
            let mut lookups = 2048 + len / 4;
            let mut icrcs = 16u32;
            for seg in std::iter::once(full).chain((h..full).step_by(4)) {
                if lookups == 0 || icrcs == 0 {
                    break;
                }
                if seg >= len || (len - 1) % seg + 1 < irn_wire::BTH_LEN + irn_wire::ICRC_LEN {
                    continue;
                }
                // A BTH with the first one's P_Key, for the first packet's queue pair or
                // another of this device's (or, searching again, another member's).
                let starts = (1..len.div_ceil(seg)).all(|k| {
                    lookups = lookups.saturating_sub(1);
                    let at = k * seg;
                    lookups > 0
                        && payload.get(at + 2..at + 4) == pkey
                        && qpn(at).is_some_and(|q| {
                            q == q0
                                || self.objects.qps.contains_key(&q)
                                || self.objects.uds.contains_key(&q)
                                || others.is_some_and(|m| {
                                    m.foreign(q)
                                        && payload
                                            .get(at + 1)
                                            .is_some_and(|b| b & 0x0f <= irn_wire::TVER_EXT_IB)
                                        && payload.get(at + 4).is_some_and(|b| b & 0x3f == 0)
                                })
                        })
                });
                if !starts {
                    continue;
                }
                icrcs -= 1;
                if hdrs.verify(ident, &payload[..seg]).is_ok() {
                    cut = Some(seg);
                    break;
                }
            }
            if cut.is_some() || foreign.is_none() {
                break;
            }
        }
        let Some(seg) = cut else {
            if single {
                return 0;
            }
            self.counters.rx_packets += 1;
            self.counters.rx_malformed += 1;
            self.counters.rx_oversized += 1;
            if let Some(c) = self.capture.as_mut() {
                c.write(packet);
            }
            return 1;
        };
        self.counters.rx_coalesced += 1;
        for (k, segment) in payload.chunks(seg).enumerate() {
            let ident = ident.wrapping_add(k as u16);
            let verify = k > 0 && self.rx.verifies_icrc();
            self.receive_segment_checked(sock, now, (from, ecn, ident), segment, verify);
        }
        len.div_ceil(seg)
    }

    /// A received IP packet: counted, captured, split (its ICRC verified where it can be)
    /// and delivered to its queue pair, whose transmit turn waits for the end of the burst
    /// ([`Core::take_turns`]).
    pub(super) fn receive(&mut self, now: Time, packet: &[u8]) {
        self.receive_checked(now, packet, self.rx.verifies_icrc());
    }

    /// [`Core::receive`], with its ICRC verified only if `verify` (not twice: the raw path
    /// checked it already, [`Core::receive_coalesced`]).
    fn receive_checked(&mut self, now: Time, packet: &[u8], verify: bool) {
        self.counters.rx_packets += 1;
        if let Some(c) = self.capture.as_mut() {
            // Everything received, malformed or not.
            c.write(packet);
        }
        let rx = match net::split(packet, verify) {
            Ok(rx) => rx,
            Err(r) => {
                self.count_reject(r);
                return;
            }
        };
        self.counters.rx_bytes += rx.datagram.len() as u64;
        self.deliver(now, rx.from, rx.ecn, rx.ib, Some(packet));
    }

    /// A received InfiniBand packet `ib` (BTH to ICRC, excluded) from `from`, to its queue
    /// pair; `packet`: the whole IP packet, which a UD queue pair's receive needs (its GRH
    /// area holds the IP header) — `None` only for a segment sure to be a connected queue
    /// pair's ([`Core::receive_segment`]).
    fn deliver(&mut self, now: Time, from: SocketAddr, ecn: Ecn, ib: &[u8], packet: Option<&[u8]>) {
        let Ok((ib, payload)) = self.rx.parse(ib) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let qpn = ib.bth.dest_qpn;
        let Some(e) = self.objects.qps.get_mut(&qpn) else {
            match (self.objects.uds.get_mut(&qpn), packet) {
                (Some(u), Some(packet)) => {
                    // A datagram: the GRH area of its receive holds the IP header.
                    let grh = irn_transport::ud::grh_area(packet);
                    if let Some(pd) = self.objects.pds.get_mut(&u.pd) {
                        u.qp.handle_packet(ib, payload, &grh, &mut pd.mem);
                    }
                    self.drain_ud(qpn);
                }
                (Some(_), None) => self.counters.rx_malformed += 1,
                (None, packet) => match packet.map(|p| self.forward(qpn, p)) {
                    Some(Forward::Handed) => self.counters.rx_forwarded += 1,
                    Some(Forward::Full) => self.counters.rx_forward_dropped += 1,
                    _ => self.counters.rx_unknown_qp += 1,
                },
            }
            return;
        };
        // Only the connected peer's packets reach the queue pair, and are dropped before the
        // PSN logic can react to them otherwise (~4 000 forged Writes made a
        // RoCE-mode sender resend 229 042 packets). The address is always checked (as rxe
        // checks it), and the UDP source port: IRN modes talk only to irn devices, which send
        // from the port Linux gives the connection (`net::roce_source_port`, RoCEv2's
        // entropy, the same both ways) or, where a device could not open that port, from the
        // port they receive on — the one the peer was told; a RoCE peer may be Linux rxe or a
        // NIC, whose choice is its own (a CM's flow label changes it), so a RoCE mode holds
        // the peer to the port of its first packet.
        let wrong = match e.remote {
            None => false,
            Some(r) if r.ip() != from.ip() => true,
            Some(_) if e.qp.config().recovery.wire != irn_transport::Wire::Irn => {
                *e.peer_sport.get_or_insert(from.port()) != from.port()
            }
            Some(r) => r.port() != from.port() && from.port() != e.peer_port,
        };
        if wrong {
            self.counters.rx_wrong_source += 1;
            return;
        }
        let Some(pd) = self.objects.pds.get_mut(&e.pd) else {
            return;
        };
        e.qp.handle_packet(now, ib, payload, ecn, &mut pd.mem);
        // Its turn comes once the burst is processed ([`Core::take_turns`]): the ACKs a burst
        // provokes then coalesce in the queue pair (IRN acknowledges every packet; consecutive
        // plain ACKs collapse into the newest), one ACK for a run of in-order packets instead of
        // one each.
        if !e.turn_due {
            e.turn_due = true;
            self.turns.received(qpn);
        }
    }

    /// Hands `packet` (whole), for queue pair `qpn`, to the member of the device's group that
    /// owns `qpn`, if another does and is open (`group.rs`).
    fn forward(&self, qpn: u32, packet: &[u8]) -> Forward {
        self.member
            .as_deref()
            .map_or(Forward::NoOwner, |m| m.forward(qpn, packet))
    }

    /// The packets other members of the device's group received for its queue pairs
    /// (`group.rs`), each delivered as [`Core::receive`] would have (already counted and
    /// captured where it arrived; its ICRC verified there where it could be).
    pub(super) fn receive_forwarded(&mut self, now: Time) {
        let Some(packets) = self.member.as_deref().map(super::group::Member::take_inbox) else {
            return;
        };
        for packet in packets {
            match net::split(&packet, false) {
                Ok(rx) => self.deliver(now, rx.from, rx.ecn, rx.ib, Some(&packet)),
                Err(_) => self.counters.rx_malformed += 1,
            }
        }
    }

    /// Gives every queue pair that received packets since the last call its transmit turn
    /// (answers, then what its window freed) and moves its completions.
    pub(super) fn take_turns(&mut self, sock: &UdpSocket, now: Time) {
        let due = self.turns.take_received();
        for &qpn in &due {
            if let Some(e) = self.objects.qps.get_mut(&qpn) {
                e.turn_due = false;
                self.transmit(sock, now, qpn);
                self.drain_completions(qpn);
            }
        }
        // The vector's allocation is kept for the next burst (nothing a turn does delivers
        // packets; were one to, its queue pair would still be listed).
        self.turns.give_back(due);
    }

    /// Fires expired timers.
    pub(super) fn timers(&mut self, sock: &UdpSocket, now: Time) {
        let qps = &self.objects.qps;
        let due = self.turns.expired(now, |t, qpn| armed_at(qps, qpn, t));
        for qpn in due {
            if let Some(e) = self.objects.qps.get_mut(&qpn) {
                // Read again after it runs, even if its deadline stays the same.
                e.armed = None;
                e.qp.handle_timeout(now);
                self.transmit(sock, now, qpn);
                self.drain_completions(qpn);
            }
        }
        // The heap may wake the engine early (a queue pair closed since), never late.
        debug_assert!(
            match (
                self.next_deadline(),
                self.objects
                    .qps
                    .values()
                    .filter_map(|e| e.qp.poll_timeout())
                    .min()
            ) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(h), Some(s)) => h <= s,
            },
            "a queue pair's deadline is missing from the timer heap"
        );
    }
}

/// Whether queue pair `qpn` is armed with deadline `t` (a timer entry that is current).
fn armed_at(qps: &BTreeMap<u32, QpEntry>, qpn: u32, t: Time) -> bool {
    qps.get(&qpn).is_some_and(|e| e.armed == Some(t))
}

/// Hands a work request to its queue pair (`post`) if CQ `cq_id` has room for one more
/// completion, which it reserves when `reserve` (every receive and every signaled send surely
/// completes; errors always do, so the room is checked either way).
pub(super) fn post_reserving(
    cqs: &mut BTreeMap<u32, CqState>,
    cq_id: u32,
    reserve: bool,
    post: impl FnOnce() -> Result<(), PostError>,
) -> Result<()> {
    let cq = cqs.get_mut(&cq_id).ok_or(Error::Gone)?;
    if cq.entries.len() + cq.reserved >= cq.depth {
        return Err(Error::CqFull(cq_id));
    }
    post()?;
    if reserve {
        cq.reserved += 1;
    }
    Ok(())
}

/// Appends a completion to CQ `to`, releasing its reservation; a full CQ overruns.
pub(super) fn push_wc(cqs: &mut BTreeMap<u32, CqState>, to: u32, wc: Wc) {
    if let Some(cq) = cqs.get_mut(&to) {
        cq.reserved = cq.reserved.saturating_sub(1);
        if cq.entries.len() >= cq.depth {
            cq.overrun = true;
        } else {
            cq.entries.push_back(wc);
            cq.queued.store(cq.entries.len(), Ordering::Release);
        }
        // Under the core lock, which the sleepers wait with: none can miss it. Once per
        // sleep: a sleeper waiting with `notified` set was notified after it began to wait.
        if cq.sleepers > 0 && !cq.notified {
            cq.notified = true;
            cq.ready.notify_all();
        }
        // Threads asleep in `poll(2)` driving the device (`drive`) are woken by the CQ's
        // eventfd, likewise once.
        if let (true, false, Some(fd)) = (cq.drivers > 0, cq.drive_rung, &cq.drive_wake) {
            cq.drive_rung = true;
            super::drive::ring(fd);
        }
        if let Some(notify) = cq.armed.take() {
            notify();
        }
    }
}

/// Puts one IP packet the device built on the wire: its UDP payload to the peer, with the
/// traffic class it was built with — or, from a device that tags its frames, the whole
/// packet behind its tagged Ethernet header (`device/tagged.rs`).
pub(super) fn send_now(
    sock: &UdpSocket,
    counters: &mut DeviceCounters,
    capture: &mut Option<Capture>,
    tagged: Option<&super::tagged::TaggedTx>,
    out: Outbound,
    ip_packet: &[u8],
) {
    if let Some(c) = capture.as_mut() {
        c.write(ip_packet);
    }
    let mut unresolved = false;
    if let Some(t) = tagged {
        let datagram = ip_packet.len().saturating_sub(out.hdr) as u64;
        match t.send(out.peer.ip(), out.tos, &[net::IoPart::of(ip_packet)]) {
            super::tagged::Tagged::Sent => {
                counters.tx_packets += 1;
                counters.tx_bytes += datagram;
                counters.tx_tagged += 1;
                return;
            }
            super::tagged::Tagged::Failed => {
                counters.tx_errors += 1;
                return;
            }
            super::tagged::Tagged::Unresolved => unresolved = true,
        }
    }
    let Some(datagram) = ip_packet.get(out.hdr..) else {
        counters.tx_errors += 1;
        return;
    };
    let msg = net::TxMsg {
        dest: out.peer,
        sport: 0,
        first: 0,
        count: 1,
        seg_len: datagram.len() as u16,
        tos: out.tos,
        coalesce: false,
        dest_qpn: 0,
    };
    let parts = [net::IoPart::of(datagram)];
    let sent = net::send_batch(sock, &[msg], std::slice::from_ref(&(0..1)), &parts);
    if unresolved {
        counters.tx_tag_unresolved += sent.packets;
    }
    counters.tx_packets += sent.packets;
    counters.tx_bytes += sent.bytes;
    counters.tx_errors += sent.errors;
}

/// Passes an IP packet through the impairment of its direction (`to`: `Some` for a packet to
/// send, `None` for a received one) and delivers what it lets through now.
pub(super) fn impair(
    core: &mut Core,
    sock: &UdpSocket,
    now: Time,
    to: Option<Outbound>,
    bytes: &[u8],
) {
    for out in core
        .impairer
        .admit(Instant::now(), to, bytes, &mut core.counters)
    {
        match out {
            Out::This => release(core, sock, now, to, bytes),
            Out::Held(h) => release(core, sock, now, h.to, &h.bytes),
        }
    }
}

/// Delivers an IP packet: sends it as `to` says, or (`None`) processes it as received.
pub(super) fn release(
    core: &mut Core,
    sock: &UdpSocket,
    now: Time,
    to: Option<Outbound>,
    bytes: &[u8],
) {
    match to {
        Some(out) => {
            // Sent from the port the packet was built with (its ICRC covers it), if that is
            // still open (a held or delayed packet may outlive its queue pair).
            let Some(sock) = core.ports.sender(sock, out.sport) else {
                core.counters.tx_errors += 1;
                return;
            };
            let tagged = core.tx.tagged.clone();
            send_now(
                sock,
                &mut core.counters,
                &mut core.capture,
                tagged.as_deref(),
                out,
                bytes,
            );
        }
        None => core.receive(now, bytes),
    }
}

/// The engine thread: receive, process, fire timers, sleep until the next deadline.
pub(super) fn engine(shared: &Shared) {
    while !shared.closed() {
        if shared.driven() && shared.polled_recently() {
            // A thread busy-polling a completion queue, or waiting on one that drives the
            // device (`drive`), receives, fires the timers and sends for the device
            // (`Shared::progress`): the engine leaves all of it to that thread — taking the
            // receive buffers from it made both threads queue on their locks — and takes over
            // once a millisecond passes without a poll or a wait. Meanwhile the watcher looks
            // every `POLLER_WATCH` and wakes the engine when the program has stopped spinning
            // (and no thread waits): the engine sends what it left behind, and takes the
            // device back once polling has stopped. The engine looks itself at its longest
            // sleep too, for a host whose busy cores leave an idle-class watcher little
            // (`watcher`).
            if !shared.watching.swap(true, Ordering::AcqRel) {
                if let Some(w) = shared.watcher.get() {
                    w.unpark();
                }
            }
            send_left_behind(shared);
            park(shared, false, MAX_SLEEP);
            continue;
        }
        if shared.driven() {
            shared.watching.store(false, Ordering::Release);
        }
        // Sleep until a packet comes or the next timer is due.
        let sleep = {
            let mut core = shared.lock();
            let now = shared.now();
            wake_in(&mut core, now)
        };
        if let Some(sleep) = sleep.filter(|s| !s.is_zero()) {
            park(shared, true, sleep);
        }
        let mut batch = shared.rx.lock().unwrap_or_else(|p| p.into_inner());
        run_once(shared, &mut batch, Round::Engine);
        drop(batch);
    }
}

/// How long whoever receives for the device may sleep before its next round: until the next
/// timer, pause release, line release or impaired packet's time, at most [`MAX_SLEEP`];
/// `None` if a round is due now — queue pairs with more to send, or waiting for a budget that
/// has room (and a line that takes frames), or packets waiting in the transmit batch that no
/// thread is sending (a poller's last posts, which rang no doorbell), or packets another
/// member of the device's group handed over (`group.rs`).
pub(super) fn wake_in(core: &mut Core, now: Time) -> Option<Duration> {
    let mut sleep = MAX_SLEEP;
    if let Some(d) = core.next_deadline() {
        sleep = sleep.min(Duration::from_nanos(d.since(now).as_nanos()));
    }
    if let Some(d) = core.next_pause_release(now) {
        sleep = sleep.min(Duration::from_nanos(d.since(now).as_nanos()));
    }
    if let Some(d) = core.next_line_release() {
        sleep = sleep.min(Duration::from_nanos(d.since(now).as_nanos()));
    }
    if let Some(at) = core.impairer.next_at() {
        sleep = sleep.min(at.saturating_duration_since(Instant::now()));
    }
    let busy = core.turns.any_pending()
        || (core.budget.has_room() && !core.line_busy(now))
        || core.tx.unsent()
        || core
            .member
            .as_deref()
            .is_some_and(super::group::Member::inbox_waiting);
    (!busy).then_some(sleep)
}

/// The watcher of a device that a thread busy-polls (or whose waiting threads drive it), while
/// the engine has left the device to the program: every [`POLLER_WATCH`] it reads when the
/// program last polled, and if that was
/// over [`super::HOLD_SPIN`] ago — the poller has stopped spinning, and may have left a batch
/// behind (held for its next visit, or its last posts), or has stopped polling for good — it
/// wakes the engine, which sends what was left and takes the device back once a millisecond
/// has passed without a poll. It runs under `SCHED_IDLE` ([`super::sched`]), so that its
/// wake-ups wait for a free core instead of taking a spinning poller's, and it takes no lock:
/// an idle-class thread preempted while holding the device's lock keeps the poller that waits
/// for it off its core until the idle thread's turn comes (below). Where the kernel refuses
/// `SCHED_IDLE` it looks under the policy it has. It sleeps while the engine has the device,
/// and leaves the engine asleep while a thread waits on a CQ to drive the device (`drive`). On
/// such a device ([`DeviceConfig::wait_drives`]) no thread spins and the watcher keeps its
/// normal policy: under `SCHED_IDLE` a program whose own threads fill the cores between waits
/// would get the device back only at the engine's 20 ms look.
///
/// Measured with both ends busy-polled on this 2-core host (docs/BENCHMARKS.md), against the
/// engine looking itself every millisecond: the 99th percentile of a 64-byte Write's latency
/// 21.1–26.9 → 14.7–18.2 µs (half round trips), 64-byte Sends 1.61–1.72 → 1.70–1.80 Mpps. A
/// watcher that sends the left-behind batch itself, under the device's lock, runs the Sends at
/// 1.13–1.56 Mpps with ten times the timeouts (18–19 in a million Sends, against 1–2).
pub(super) fn watcher(shared: &Shared) {
    if shared.busy_poll {
        let _ = super::sched::lower_to_idle();
    }
    while !shared.closed() {
        if !shared.watching.load(Ordering::Acquire) {
            // The engine has the device: nothing to look at until it leaves it to a poller
            // (it unparks this thread then).
            std::thread::park_timeout(MAX_SLEEP);
            continue;
        }
        std::thread::park_timeout(POLLER_WATCH);
        // A thread waiting in `poll(2)` to drive the device (`drive`) needs no engine.
        let waiter = shared.drive.as_ref().is_some_and(|d| d.waiting());
        if shared.watching.load(Ordering::Acquire) && !shared.spinning() && !waiter {
            shared.wake_engine();
        }
    }
}

/// How often a device that a thread busy-polls is looked at ([`watcher`]): what that thread's
/// rounds left in the transmit batch (a held batch: [`super::tx::TxState::held`], or its last
/// posts) leaves at most this long (plus [`super::HOLD_SPIN`]) after its last poll, and the
/// engine takes the device back at most this long after the millisecond without a poll that
/// makes it do so — when a core is free for the watcher, which runs under `SCHED_IDLE`; on a
/// host whose every core is busy with other work, the engine's own look at [`MAX_SLEEP`]
/// bounds both. At 200 µs, with the engine looking (a thread that preempts a poller), a
/// busy-polled 64-byte Write round trip took 18 % longer on average and 20 % at the 99th
/// percentile than at a millisecond (docs/VERBS.md). An IRN peer
/// whose timeout is shorter than this (the runtime's floor is 500 µs,
/// [`super::runtime_recovery`]) may so time out once on the last ACK of a poller that
/// stopped, and resend one packet.
pub(super) const POLLER_WATCH: Duration = Duration::from_millis(1);

/// What a busy poller's rounds left to be sent, once it has stopped spinning (no poll for
/// [`super::HOLD_SPIN`]): a batch its round held for its next visit, or posts it left for its
/// next poll. A poller still spinning sends them itself, and so does one in the middle of a
/// round (it holds the receive buffers: a round may take longer than `HOLD_SPIN`); the
/// buffers stay taken while this sends, so that no round holds a batch meanwhile.
fn send_left_behind(shared: &Shared) {
    // A thread waiting on a CQ asleep in `poll(2)` (`drive`) polled last before it slept: it
    // counts as spinning, but sends nothing until it wakes.
    let asleep = shared.drive.as_ref().is_some_and(|d| d.asleep());
    if shared.spinning() && !asleep {
        return;
    }
    let _round = match shared.rx.try_lock() {
        Ok(b) => b,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    let mut core = shared.lock();
    if !core.tx.unsent() {
        return;
    }
    if core.tx.held {
        core.counters.tx_held_left += 1;
    }
    drop(shared.flush(core));
}

/// The engine sleeps for up to `sleep`, woken early by the eventfd (a doorbell, more to send,
/// the device closing) and, with `socket`, by a packet to receive.
fn park(shared: &Shared, socket: bool, sleep: Duration) {
    use rustix::event::{PollFd, PollFlags};
    let ts = rustix::event::Timespec {
        tv_sec: sleep.as_secs() as i64,
        tv_nsec: i64::from(sleep.subsec_nanos()),
    };
    let rx_fd = shared.socks.rx_fd();
    let mut fds = vec![PollFd::new(&shared.wake, PollFlags::IN)];
    if socket {
        fds.push(PollFd::new(&rx_fd, PollFlags::IN));
    }
    // A pause frame (a resume above all) wakes the engine too.
    let pause_fd = shared.pause_sock.as_ref().map(std::os::fd::AsFd::as_fd);
    if let Some(fd) = &pause_fd {
        fds.push(PollFd::new(fd, PollFlags::IN));
    }
    let _ = rustix::event::poll(&mut fds, Some(&ts));
    let mut drain = [0u8; 8];
    let _ = rustix::io::read(&shared.wake, &mut drain);
}

/// Who runs a round of the device's work.
#[derive(Debug, Clone, Copy)]
pub(super) enum Round {
    /// The engine thread.
    Engine,
    /// A thread busy-polling a CQ; `spinning`: its polls come under [`super::HOLD_SPIN`]
    /// apart.
    Poller { spinning: bool },
}

/// One round of the device's work, on the engine thread or a busy-polling one (either holds
/// `batch`): what the socket holds is received and processed, held and delayed packets
/// whose time has come are released, due timers fire, and queue pairs waiting for the budget
/// or with more to send get their turns; what they built leaves — except that the round of a
/// spinning poller that received packets leaves what they provoked for the poller's next
/// visit ([`super::tx::TxState::held`]). A poller's round first sends what waits from before.
pub(super) fn run_once(shared: &Shared, batch: &mut RxBatch, round: Round) {
    if let Round::Poller { .. } = round {
        let core = shared.lock();
        if core.tx.due() {
            drop(shared.flush(core));
        }
    }
    // Bursts of packets (one system call each, read without the lock) until the socket
    // is empty or RX_PACKETS have been taken, before the timers and the turns of queue
    // pairs with more to send: acknowledgements free the queue pairs' windows and the
    // device's budget (each queue pair answers once the burst is processed: its ACKs
    // coalesce). One burst per
    // wake-up let a sender with many queue pairs hand the kernel thousands
    // of packets per 64 datagrams it read, and its ACKs waited in its socket until their
    // queue pairs' timers fired (256 queue pairs).
    let mut taken = 0;
    let raw = shared.socks.path() == ReceivePath::Raw;
    loop {
        batch.recv(&shared.socks);
        taken += batch.got.len();
        let mut core = shared.lock();
        let now = shared.now();
        let sock = &shared.socks.udp;
        // Pause frames first, as a NIC's MAC acts on them when they arrive: the burst's
        // packets may give queue pairs turns (ACKs, responses, new data).
        if shared.pause_sock.is_some() {
            core.release_paused(shared.pause_sock.as_ref(), now);
        }
        core.counters.rx_coalesced += batch.coalesced;
        for rx in &batch.got {
            if rx.malformed {
                core.counters.rx_packets += 1;
                core.counters.rx_malformed += 1;
                continue;
            }
            let packet = batch.packet(rx);
            if let Some((from, ecn, k)) = rx.segment {
                core.receive_segment(sock, now, (from, ecn, k), packet);
                continue;
            }
            if raw {
                // A coalesced datagram's packets count towards the burst's limit each.
                let n = core.receive_coalesced(sock, now, packet);
                if n > 0 {
                    taken += n - 1;
                    continue;
                }
            }
            if !core.impairer.rx().is_active() {
                core.receive(now, packet);
                continue;
            }
            impair(&mut core, sock, now, None, packet);
        }
        core.take_turns(sock, now);
        if !batch.full() || taken >= RX_PACKETS {
            break;
        }
        // What the burst provoked (ACKs, new data) leaves before the next is read.
        drop(shared.flush(core));
    }
    let mut core = shared.lock();
    let now = shared.now();
    let sock = &shared.socks.udp;
    if let Round::Engine = round {
        core.counters.engine_rounds += 1;
    }
    core.receive_forwarded(now);
    core.release_paused(shared.pause_sock.as_ref(), now);
    core.serve_line(sock, now);
    // Impaired packets whose time has come (delayed ones in the order they were held: a slow
    // link keeps its order).
    for h in core.impairer.due(Instant::now()) {
        release(&mut core, sock, now, h.to, &h.bytes);
    }
    core.take_turns(sock, now);
    core.timers(sock, now);
    // Queue pairs waiting for the in-flight budget, as far as it has room.
    core.serve_budget_queue(sock, now);
    // Queue pairs with more to send get another turn each.
    for qpn in core.turns.pending() {
        core.transmit(sock, now, qpn);
        core.drain_completions(qpn);
    }
    // What every turn of this wake-up built leaves now — or, a poller's round having received,
    // with what its program does next.
    if matches!(round, Round::Poller { spinning: true }) && taken > 0 && core.tx.filling() > 0 {
        if !core.tx.held {
            core.counters.tx_held += 1;
        }
        core.tx.held = true;
        return;
    }
    drop(shared.flush(core));
}
