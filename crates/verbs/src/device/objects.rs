//! The verbs objects' calls: protection domains and memory regions, completion queues, queue
//! pairs — each a handle on the device's shared [`Core`].

use super::*;

// ---------------------------------------------------------------------------------------------
// Protection domains and memory regions

impl Pd {
    /// Registers a new zeroed memory region of `len` bytes with `access` rights
    /// (`ibv_reg_mr` over a fresh buffer).
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        self.register(access, None, |mem| mem.alloc(len))
    }

    /// Registers the application's buffer `buf` (`ibv_reg_mr` over memory the application
    /// owns): moved into the device, never copied — packets are placed into these very bytes
    /// and sent from them — and [`Mr::into_vec`] gives the same allocation back.
    ///
    /// While registered the bytes are the device's: the application reaches them only through
    /// the [`Mr`] ([`read`](Mr::read), [`write`](Mr::write), [`with_bytes`](Mr::with_bytes),
    /// under the device lock), which is what makes this safe where `ibv_reg_mr` is not. Take
    /// the buffer back only once no work request or peer still needs it: afterwards accesses
    /// through its keys fail (`IBV_WC_LOC_PROT_ERR` / remote access error).
    pub fn reg_mr_vec(&self, buf: Vec<u8>, access: Access) -> Result<Mr> {
        self.register(access, None, |mem| mem.adopt(buf))
    }

    /// [`reg_mr_vec`](Self::reg_mr_vec) for a boxed slice (turned into a `Vec` without a copy).
    pub fn reg_mr_boxed(&self, buf: Box<[u8]>, access: Access) -> Result<Mr> {
        self.reg_mr_vec(buf.into_vec(), access)
    }

    /// Registers `len` bytes of the application's memory at `ptr`, as `ibv_reg_mr` does:
    /// packets are placed there directly by the engine thread (no copy through the device),
    /// and sent from there. The region is named by `ptr` itself ([`Mr::addr`]): scatter/gather
    /// entries and a peer's RETHs give the application's own addresses, as with a NIC.
    ///
    /// # Safety
    ///
    /// Until the returned [`Mr`] is dropped, the `len` bytes at `ptr`
    /// must stay allocated and valid, and the application must not read or write the bytes a
    /// posted work request or a peer (remote Write, Read, atomic) may access while it may —
    /// exactly as with an RDMA NIC, which writes behind the program's back: wait for the
    /// completions (and for the peer's word that it is done) before touching those bytes. The
    /// rest of the region is the application's meanwhile: the device touches only the bytes
    /// requests and peers name ([`irn_transport::AppBuffer`]), and [`Mr::read`],
    /// [`Mr::write`] and [`Mr::with_bytes`], which see the whole region, only when the
    /// application calls them. A null `ptr` or a `len` of 0 registers an empty region.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller's contract is this one's.
        unsafe { self.reg_mr_raw_iova(ptr, len, access, ptr as u64) }
    }

    /// [`Pd::reg_mr_raw`], the region named by `iova` instead of `ptr` (`ibv_reg_mr_iova(3)`:
    /// `IBV_ACCESS_ZERO_BASED` names it from 0, a program may choose any base).
    ///
    /// # Safety
    ///
    /// [`Pd::reg_mr_raw`]'s.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_raw_iova(
        &self,
        ptr: *mut u8,
        len: usize,
        access: Access,
        iova: u64,
    ) -> Result<Mr> {
        let buf = match std::ptr::NonNull::new(ptr) {
            // SAFETY: the caller's contract above is RawBuffer's.
            Some(p) if len > 0 => Some(Box::new(unsafe {
                super::app_memory::RawBuffer::new(p, len)
            })),
            _ => None,
        };
        let iova = buf.is_some().then_some(iova);
        self.register(access, iova, |mem| match buf {
            Some(b) => mem.adopt_buffer(b),
            None => mem.alloc(0),
        })
    }

    /// Registers the allocation `place` makes in this PD's memory, whole, named by `iova`
    /// (by its own address when `None`).
    fn register(
        &self,
        access: Access,
        iova: Option<u64>,
        place: impl FnOnce(&mut irn_transport::ByteMemory) -> u64,
    ) -> Result<Mr> {
        let mut core = self.shared.lock();
        let pd = core.objects.pds.get_mut(&self.id).ok_or(Error::Gone)?;
        let buffer = place(&mut pd.mem);
        let len = pd.mem.len_of(buffer).unwrap_or(0);
        let addr = iova.unwrap_or(buffer);
        let keys = match pd.mem.register_iova(buffer, len as u64, access, addr) {
            Ok(k) => k,
            Err(e) => {
                pd.mem.release(buffer);
                return Err(e.into());
            }
        };
        Ok(Mr {
            shared: self.shared.clone(),
            pd: self.id,
            addr,
            buffer,
            len: len as u64,
            lkey: keys.lkey,
            rkey: keys.rkey,
        })
    }

    /// Creates a reliable-connected queue pair in RESET (`ibv_create_qp`).
    pub fn create_qp(&self, send_cq: &Cq, recv_cq: &Cq, init: QpInit) -> Result<Qp> {
        if init.max_send_wr == 0 || init.max_recv_wr == 0 {
            return Err(Error::Config("queue depths must be at least 1"));
        }
        super::check_runtime_mode(init.mode)?;
        super::check_runtime_cc(init.mode, init.cc)?;
        let mut core = self.shared.lock();
        if !core.objects.pds.contains_key(&self.id) {
            return Err(Error::Gone);
        }
        if !core.objects.cqs.contains_key(&send_cq.id)
            || !core.objects.cqs.contains_key(&recv_cq.id)
        {
            return Err(Error::Gone);
        }
        let qpn = core.objects.fresh_qpn();
        // Sized for 1024-byte packets until it connects and its path MTU is known.
        let (recovery, cc, cnp_interval) = init.for_path(1024);
        let cfg = QpConfig {
            qpn,
            recovery,
            cc,
            cnp_interval,
            line_rate_bps: init.line_rate_bps,
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            ..QpConfig::default()
        };
        let now = self.shared.now();
        let qp = QueuePair::new(now, cfg)?;
        let port = core.local.port();
        core.objects.qps.insert(
            qpn,
            QpEntry {
                qp,
                pd: self.id,
                send_cq: send_cq.id,
                recv_cq: recv_cq.id,
                remote: None,
                armed: None,
                peer_sport: None,
                gso: false,
                dscp: 0,
                sport: port,
                peer_port: port,
                init,
                charged: 0,
                waiting: false,
                turn_due: false,
            },
        );
        Ok(Qp {
            shared: self.shared.clone(),
            qpn,
        })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        // Packets built from its memory where it lies (`lent`) leave before it may be freed.
        core.flush_tx(&self.shared.socks.udp);
        let id = self.id;
        let used = core.objects.pd_in_use(id);
        if used {
            if let Some(pd) = core.objects.pds.get_mut(&id) {
                pd.closed = true;
            }
        } else {
            core.objects.pds.remove(&id);
        }
    }
}

impl Mr {
    /// Virtual address of the first byte (what a peer puts in a RETH).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// A scatter/gather entry for `len` bytes at `offset`.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.addr + offset,
            len,
            lkey: self.lkey,
        }
    }

    fn range(&self, offset: u64, len: usize) -> Result<std::ops::Range<usize>> {
        let end = offset.checked_add(len as u64).filter(|&e| e <= self.len);
        match end {
            Some(end) => Ok(offset as usize..end as usize),
            None => Err(Error::OutOfRange {
                offset,
                len: len as u64,
                size: self.len,
            }),
        }
    }

    /// Copies `data` into the region at `offset` (the application writing its own buffer).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len())?;
        let mut core = self.shared.lock();
        let pd = core.objects.pds.get_mut(&self.pd).ok_or(Error::Gone)?;
        let buf = pd.mem.buffer_mut(self.buffer).ok_or(Error::Gone)?;
        buf[r].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes at `offset` out of the region.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let r = self.range(offset, out.len())?;
        let core = self.shared.lock();
        let pd = core.objects.pds.get(&self.pd).ok_or(Error::Gone)?;
        let buf = pd.mem.buffer(self.buffer).ok_or(Error::Gone)?;
        out.copy_from_slice(&buf[r]);
        Ok(())
    }

    /// Deregisters the region and gives its buffer back: the very `Vec` handed to
    /// [`Pd::reg_mr_vec`] (or allocated by [`Pd::reg_mr`]), with whatever was placed into it —
    /// never a copy. A region over memory registered by address ([`Pd::reg_mr_raw`]) has no
    /// `Vec` to give: [`Error::Gone`].
    pub fn into_vec(self) -> Result<Vec<u8>> {
        let mut core = self.shared.lock();
        // Packets that carry its bytes where they lie (`lent`) leave before the buffer goes.
        core.flush_tx(&self.shared.socks.udp);
        let pd = core.objects.pds.get_mut(&self.pd).ok_or(Error::Gone)?;
        let _ = pd.mem.deregister(self.lkey);
        pd.mem.release(self.buffer).ok_or(Error::Gone)
    }

    /// Runs `f` over the region's bytes, under the device lock (hashing, checking).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let core = self.shared.lock();
        let pd = core.objects.pds.get(&self.pd).ok_or(Error::Gone)?;
        let buf = pd.mem.buffer(self.buffer).ok_or(Error::Gone)?;
        Ok(f(buf))
    }
}

impl Drop for Mr {
    /// Deregisters the region and lets its memory go: the device's allocation is freed, an
    /// application buffer is no longer touched.
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        // Packets that carry its bytes where they lie (`lent`) leave before the buffer goes.
        core.flush_tx(&self.shared.socks.udp);
        if let Some(pd) = core.objects.pds.get_mut(&self.pd) {
            let _ = pd.mem.deregister(self.lkey);
            pd.mem.release(self.buffer);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Completion queues

impl Cq {
    /// Takes up to `max` completions (`ibv_poll_cq`). An overrun CQ reports
    /// [`Error::CqOverrun`] once, then goes on.
    pub fn poll(&self, max: usize) -> Result<Vec<Wc>> {
        let mut out = Vec::new();
        self.poll_into(max, &mut out)?;
        Ok(out)
    }

    /// [`Cq::poll`] appending to `out` instead of allocating: the number taken.
    pub fn poll_into(&self, max: usize, out: &mut Vec<Wc>) -> Result<usize> {
        // This thread receives and processes for the device (DeviceConfig::busy_poll,
        // DeviceConfig::wait_drives) — but not through a CQ armed for an event on a device
        // its waiting threads drive: the program waits for the event elsewhere, the engine
        // has the device (`Cq::req_notify`), and a poll that drove it would take it back for
        // a millisecond (the poll after arming that verbs programs make).
        if self.shared.busy_poll || (self.shared.drive.is_some() && !self.armed()) {
            self.shared.progress();
        }
        let mut core = self.shared.flush_unless_held(self.shared.lock());
        let cq = core.objects.cq_mut(self.id)?;
        if std::mem::take(&mut cq.overrun) {
            return Err(Error::CqOverrun(self.id));
        }
        let n = max.min(cq.entries.len());
        out.extend(cq.entries.drain(..n));
        cq.queued.store(cq.entries.len(), Ordering::Release);
        Ok(n)
    }

    /// Armed for a completion event ([`Cq::req_notify`]) that has not come yet.
    fn armed(&self) -> bool {
        let mut core = self.shared.lock();
        core.objects
            .cq_mut(self.id)
            .is_ok_and(|cq| cq.armed.is_some())
    }

    /// How many completions the CQ holds, read without the device lock: what a program
    /// spinning on an empty CQ asks before it polls (a NIC's CQ is memory the program reads;
    /// taking the device's lock for every empty poll would take it from the engine that is
    /// producing the completions). Exact when it was last changed; a completion arriving
    /// meanwhile is seen at the next look.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq(3)`): `notify` is called
    /// when the next completion arrives — not for those already queued, which a consumer
    /// polls for after arming — and the CQ is then disarmed. Arming again replaces the
    /// callback. Every completion counts, solicited or not: a consumer that asked for
    /// solicited completions only may see an event for another, and polls as it would
    /// after any event (`ibv_get_cq_event(3)` allows events that find nothing).
    ///
    /// On a device whose waiting threads drive it ([`DeviceConfig::wait_drives`]), arming
    /// hands the device back to the engine at once: the program waits for its event outside
    /// [`Cq::wait`] (a completion channel), and the engine would otherwise leave the device
    /// to it for a millisecond after its last poll or wait. Polls of the armed CQ, until its
    /// event, leave the device to the engine ([`Cq::poll`]).
    pub fn req_notify(&self, notify: super::CqNotify) -> Result<()> {
        let mut core = self.shared.lock();
        core.objects.cq_mut(self.id)?.armed = Some(notify);
        drop(core);
        if self.shared.drive.is_some() {
            self.shared.hand_back();
        }
        Ok(())
    }

    /// Takes one completion, waiting up to `timeout` for it (`ibv_get_cq_event` + poll).
    /// `Ok(None)` when none came in time.
    pub fn wait(&self, timeout: Duration) -> Result<Option<Wc>> {
        if self.shared.busy_poll {
            return self.spin(Instant::now() + timeout);
        }
        if let Some(drive) = &self.shared.drive {
            let id = self.id;
            return self.drive_until(drive, Instant::now() + timeout, |cq| take_one(id, cq));
        }
        self.sleep(timeout)
    }

    /// Waits up to `timeout` for the CQ to hold a completion (or to have overrun), without
    /// taking it: whether one is there. For a program that spins on [`Cq::poll`] — an
    /// `ibv_poll_cq` loop — to give the host's CPU to the engine that makes its completions
    /// between polls. A busy-polled device is driven meanwhile, as by a poll; with
    /// [`DeviceConfig::wait_drives`] the calling thread drives the device and sleeps in
    /// `poll(2)` between rounds, as [`Cq::wait`] does — unless the CQ is armed for an event,
    /// whose program waits for the event and leaves the device to the engine (as a poll of
    /// an armed CQ does, [`Cq::req_notify`]).
    pub fn wait_ready(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        if self.shared.busy_poll {
            loop {
                self.shared.progress();
                if self.queued() > 0 {
                    return Ok(true);
                }
                if Instant::now() >= deadline || self.shared.closed() {
                    return Ok(false);
                }
                std::hint::spin_loop();
            }
        }
        let ready =
            |cq: &mut super::CqState| (cq.overrun || !cq.entries.is_empty()).then_some(Ok(()));
        let ready = match &self.shared.drive {
            Some(drive) if !self.armed() => self.drive_until(drive, deadline, ready)?,
            _ => self.sleep_until(deadline, ready)?,
        };
        Ok(ready.is_some())
    }

    /// [`Cq::wait`] that sleeps on the condition variable whether or not the device busy-polls:
    /// for a thread that waits all the time for rare events (the connection manager's agent,
    /// `crate::cm`), which, spinning, burnt a core of a busy-polling device for as long as the
    /// agent lived, and took the device's work from the engine. Its completions still come:
    /// whichever thread receives for the device (the engine, or an application thread polling)
    /// wakes it.
    pub(crate) fn sleep(&self, timeout: Duration) -> Result<Option<Wc>> {
        let id = self.id;
        self.sleep_until(Instant::now() + timeout, |cq| take_one(id, cq))
    }

    /// Sleeps on the CQ's condition variable (with the device's lock, which completions are
    /// added under, so none is missed) until `take` finds what it waits for — its answer —
    /// or `deadline` passes or the device closes (`Ok(None)`).
    fn sleep_until<R>(
        &self,
        deadline: Instant,
        mut take: impl FnMut(&mut super::CqState) -> Option<Result<R>>,
    ) -> Result<Option<R>> {
        let mut core = self.shared.flush(self.shared.lock());
        loop {
            let cq = core.objects.cq_mut(self.id)?;
            if let Some(r) = take(cq) {
                return r.map(Some);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shared.closed() {
                return Ok(None);
            }
            let ready = cq.ready.clone();
            cq.sleepers += 1;
            cq.notified = false;
            core = ready
                .wait_timeout(core, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            if let Ok(cq) = core.objects.cq_mut(self.id) {
                cq.sleepers -= 1;
            }
        }
    }

    /// [`Cq::wait`] of a busy-polling device: polls — receiving for the device — until a
    /// completion comes or `deadline` passes.
    fn spin(&self, deadline: Instant) -> Result<Option<Wc>> {
        loop {
            self.shared.progress();
            {
                let mut core = self.shared.lock();
                let cq = core.objects.cq_mut(self.id)?;
                if std::mem::take(&mut cq.overrun) {
                    return Err(Error::CqOverrun(self.id));
                }
                if let Some(wc) = cq.entries.pop_front() {
                    cq.queued.store(cq.entries.len(), Ordering::Release);
                    return Ok(Some(wc));
                }
            }
            if Instant::now() >= deadline || self.shared.closed() {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }

    /// The device this CQ belongs to has closed (dropped): waiting on it returns at once.
    pub(crate) fn device_closed(&self) -> bool {
        self.shared.closed()
    }

    /// Whether the device busy-polls ([`DeviceConfig::busy_poll`]): polling this CQ drives it
    /// and waiting spins, so a program spinning on memory for a peer's Write polls the CQ as
    /// it spins. (With [`DeviceConfig::wait_drives`] a poll drives the device too, but a wait
    /// sleeps: this is false.)
    pub fn busy_polls(&self) -> bool {
        self.shared.busy_poll
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.shared
            .lock()
            .objects
            .cqs
            .get(&self.id)
            .map_or(0, |c| c.entries.len())
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a wait on CQ `id` takes: its overrun, reported once, or its first completion.
fn take_one(id: u32, cq: &mut super::CqState) -> Option<Result<Wc>> {
    if std::mem::take(&mut cq.overrun) {
        return Some(Err(Error::CqOverrun(id)));
    }
    let wc = cq.entries.pop_front()?;
    cq.queued.store(cq.entries.len(), Ordering::Release);
    Some(Ok(wc))
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.shared.lock().objects.cqs.remove(&self.id);
    }
}

// ---------------------------------------------------------------------------------------------
// Queue pairs

impl Qp {
    /// The queue pair number (24 bits), what the peer puts in its RTR as `dest_qpn`.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Runs `f` on the core, then gives the queue pair its transmit turn and moves its
    /// completions: what every verb on a queue pair ends with.
    fn with<R>(&self, f: impl FnOnce(&mut Core, Time) -> Result<R>) -> Result<R> {
        self.with_flush(true, f)
    }

    /// [`Qp::with`]; `flush` false for a post, whose packets may wait in the device's
    /// transmit batch for the doorbell ([`Core::ring_doorbell`]) when the queue pair has
    /// packets in flight already or the batch is filling: a stream of posts then leaves in
    /// few system calls. A post to an idle queue pair leaves at once, as before (the latency
    /// of one operation at a time is untouched).
    fn with_flush<R>(
        &self,
        flush: bool,
        f: impl FnOnce(&mut Core, Time) -> Result<R>,
    ) -> Result<R> {
        let mut core = self.shared.lock();
        let Some(e) = core.objects.qps.get(&self.qpn) else {
            return Err(Error::Gone);
        };
        let (busy_qp, waiting, held) = (e.qp.in_flight() > 0, core.tx_waiting(), core.tx.held);
        let before = core.tx.filling();
        let now = self.shared.now();
        let r = f(&mut core, now);
        let more = core.transmit(&self.shared.socks.udp, now, self.qpn);
        // A batch a busy poller holds leaves with a post to an idle queue pair that adds
        // packets to it (it waits for this: `TxState::held`); a post that adds none — a
        // receive — leaves it held for the Send that answers. (`held` is read after the turn:
        // a batch the turn filled to the brim has left, and its hold with it.)
        let added = core.tx.filling() > before;
        let defer = !flush && (busy_qp || (waiting && !held) || (core.tx.held && !added));
        // A thread busy-polling the device sends what waits, serves the budget and gives
        // queue pairs their turns with its next poll, so the engine is left asleep (it wakes
        // within a millisecond to take over if the polling stops): in a busy-polled 64-byte
        // Send stream the engine's wake-ups for doorbells were a quarter of the sender's
        // cycles (docs/BENCHMARKS.md).
        let poller = self.shared.driven() && self.shared.polled_before(now);
        let more = if defer {
            // The first deferred post of a batch wakes the engine (one eventfd write per
            // batch): a thread that polls now may stop before it sends the batch.
            (!poller && core.ring_doorbell()) || more
        } else {
            core = self.shared.flush(core);
            more
        };
        core.drain_completions(self.qpn);
        // A modify to RESET or ERROR may have freed budget that others wait for.
        let more = more || core.budget.has_room();
        drop(core);
        if more && !poller {
            self.shared.wake_engine();
        }
        // What a thread asleep in a driving wait is left to send or to give a turn to: wake
        // it (`drive`). A thread that posts and then waits finds none asleep.
        if poller && (defer || more) {
            if let Some(d) = self.shared.drive.as_ref().filter(|d| d.asleep()) {
                d.wake_for_post();
            }
        }
        r
    }

    /// Moves the queue pair to `to` (`ibv_modify_qp`) with the attributes `mask` names.
    /// INIT → RTR also needs `remote`: the peer's address (from its GID) and UDP port.
    pub fn modify(
        &self,
        to: QpState,
        attr: &QpAttr,
        mask: AttrMask,
        remote: Option<SocketAddr>,
    ) -> Result<()> {
        let qpn = self.qpn;
        let r = self.with(|core, now| {
            let local = core.local;
            let e = core.objects.qps.get_mut(&qpn).ok_or(Error::Gone)?;
            let connecting = to == QpState::Rtr && e.qp.state() == QpState::Init;
            if connecting {
                let r = remote.ok_or(Error::NoRemote)?;
                if r.is_ipv4() != local.is_ipv4() {
                    return Err(Error::AddressFamily(r.ip(), local.ip()));
                }
                let mtu = if mask.contains(AttrMask::PATH_MTU) {
                    attr.path_mtu
                } else {
                    e.qp.attr().path_mtu
                };
                // An MTU the transition refuses sizes nothing: `modify` reports it (and a
                // refused transition leaves a queue pair that the next attempt sizes again).
                if irn_transport::path_mtu_valid(mtu) {
                    let route = crate::net::active_mtu(r.ip());
                    if mtu > route {
                        return Err(Error::PathMtu {
                            asked: mtu,
                            peer: r.ip(),
                            route,
                        });
                    }
                    e.size_for_path(now, mtu)?;
                }
            }
            e.qp.modify(now, to, attr, mask)?;
            if let Some(r) = remote {
                e.remote = Some(r);
                e.peer_sport = None;
            }
            if connecting {
                // Its own UDP source port, Linux's choice for this connection (RoCEv2's
                // entropy); an irn peer sends from the same one (the choice is symmetric).
                let (dest_qpn, old) = (e.qp.attr().dest_qpn, e.sport);
                let sport = core.source_port(qpn, dest_qpn);
                if let Some(e) = core.objects.qps.get_mut(&qpn) {
                    e.sport = sport;
                    e.peer_port = crate::net::roce_source_port(qpn, dest_qpn);
                }
                if old != sport {
                    core.release_port(old);
                }
                // What the peer may have in flight towards this queue pair: the receive buffer
                // grows to hold it (`Shared::fit_receive_buffer`, after this call).
                if let Some(e) = core.objects.qps.get(&qpn) {
                    let cap = e.qp.config().recovery.bdp_cap.unwrap_or(0) as usize;
                    let bytes = cap * e.qp.attr().path_mtu as usize;
                    core.rx.expect_in_flight(bytes);
                }
            }
            Ok(())
        });
        if r.is_ok() && to == QpState::Rtr {
            self.shared.fit_receive_buffer();
        }
        r
    }

    /// RESET → INIT with `attr`'s access flags and P_Key: receives may be posted from here on.
    pub fn init(&self, attr: &QpAttr) -> Result<()> {
        self.modify(
            QpState::Init,
            attr,
            AttrMask::ACCESS_FLAGS.with(AttrMask::PKEY),
            None,
        )
    }

    /// (RESET →) INIT → RTR → RTS towards `remote` (its address and port, QPN and first PSN),
    /// sending from `local_psn`, with `attr`'s other settings: the three `ibv_modify_qp` calls
    /// of `ibv_rc_pingpong`.
    pub fn connect(&self, attr: &QpAttr, remote: &RemoteQp, local_psn: u32) -> Result<()> {
        let attr = QpAttr {
            dest_qpn: remote.qpn,
            rq_psn: irn_wire::Psn::new(remote.psn),
            sq_psn: irn_wire::Psn::new(local_psn),
            ..*attr
        };
        let addr = SocketAddr::new(remote.gid.ip(), remote.port);
        if self.state() == QpState::Reset {
            self.init(&attr)?;
        }
        self.modify(
            QpState::Rtr,
            &attr,
            AttrMask::PATH_MTU
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
            Some(addr),
        )?;
        self.modify(
            QpState::Rts,
            &attr,
            AttrMask::SQ_PSN
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
            None,
        )
    }

    /// Says whether the peer's device takes coalesced datagrams (its
    /// [`Device::accepts_gso`]; learnt out of band — `irn perf` swaps it in its parameters).
    /// When it does, this queue pair's packets leave in UDP GSO messages: up to 64 packets of
    /// one size to the peer in one system call, cut into datagrams by the kernel (on loopback
    /// and veths they reach the peer still whole, and its device splits them; elsewhere they
    /// are cut before the wire, with the IPv4 identifications the ICRCs were computed over).
    /// Off by default: Linux rxe, a NIC and older irn devices need one packet per datagram.
    pub fn set_peer_gso(&self, on: bool) -> Result<()> {
        self.with(|core, _| {
            if let Some(e) = core.objects.qps.get_mut(&self.qpn) {
                e.gso = on;
            }
            Ok(())
        })
    }

    /// Sets the traffic class its packets carry: the GRH traffic class of its address vector
    /// (`ibv_qp_attr.ah_attr.grh.traffic_class`), which RoCEv2 carries in the IP header's
    /// DSCP and ECN field (IBTA RoCEv2 annex A17.4.5.2); the device keeps the ECN bits for
    /// congestion control and sends `traffic_class >> 2` as the DSCP, which switches classify
    /// by (DSCP-based PFC, seed 001 §3). Default 0.
    pub fn set_traffic_class(&self, traffic_class: u8) -> Result<()> {
        self.with(|core, _| {
            if let Some(e) = core.objects.qps.get_mut(&self.qpn) {
                e.dscp = traffic_class >> 2;
            }
            Ok(())
        })
    }

    /// Posts a send work request (`ibv_post_send`): Send, Write, Write with immediate, Read,
    /// atomics. Refused with [`Error::CqFull`] when the send CQ could overflow.
    ///
    /// To an idle queue pair its first packets leave before this returns. Behind packets in
    /// flight they may wait in the device's transmit batch, as a NIC's work requests wait
    /// for the doorbell, and leave with the next [`Cq::poll`] or [`Cq::wait`] of the device,
    /// a full batch, or the engine (woken by the batch's first post): a stream of posts
    /// leaves in few system calls ([`DeviceCounters::tx_calls`]), and no post waits for a
    /// poll.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post_send_list([wr]).map(drop).map_err(|e| e.error)
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_list([wr]).map(drop).map_err(|e| e.error)
    }

    /// Posts send work requests in order under one acquisition of the device, as
    /// `ibv_post_send` takes a chained list (perftest's `--post_list`): the queue pair's turn
    /// builds their first packets at once (up to a turn's 32) and the engine the rest, and
    /// they leave in as few system calls as the batch allows. Stops at the first one refused; returns
    /// how many were posted, or which was refused and why (`bad_wr`) — those before it are
    /// posted and will complete.
    pub fn post_send_list(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> std::result::Result<usize, PostListError> {
        self.post_list(|e| e.send_cq, wrs, |w| w.signaled, |qp, w| qp.post_send(w))
    }

    /// Posts receive work requests in order under one acquisition of the device
    /// (`ibv_post_recv` with a chained list); as [`Qp::post_send_list`].
    pub fn post_recv_list(
        &self,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> std::result::Result<usize, PostListError> {
        self.post_list(|e| e.recv_cq, wrs, |_| true, |qp, w| qp.post_recv(w))
    }

    /// Hands work requests to the queue pair (`post`), each if the completion queue `cq_of`
    /// names has room for one more completion, which it reserves when `reserve` says so
    /// (every WR may complete, errors are always reported; only signaled ones surely do).
    fn post_list<W>(
        &self,
        cq_of: fn(&QpEntry) -> u32,
        wrs: impl IntoIterator<Item = W>,
        reserve: fn(&W) -> bool,
        post: fn(&mut QueuePair, W) -> Result<(), PostError>,
    ) -> std::result::Result<usize, PostListError> {
        let qpn = self.qpn;
        let mut posted = 0;
        self.with_flush(false, |core, _| {
            for wr in wrs {
                let e = core.objects.qps.get_mut(&qpn).ok_or(Error::Gone)?;
                let cq_id = cq_of(e);
                let signaled = reserve(&wr);
                engine::post_reserving(&mut core.objects.cqs, cq_id, signaled, || {
                    post(&mut e.qp, wr)
                })?;
                posted += 1;
            }
            Ok(())
        })
        .map(|()| posted)
        .map_err(|error| PostListError { posted, error })
    }

    /// The attributes it runs with (`ibv_query_qp`): what `modify` set, and what the
    /// connection manager chose for a queue pair it connected.
    pub fn attr(&self) -> Result<QpAttr> {
        self.shared
            .lock()
            .objects
            .qps
            .get(&self.qpn)
            .map(|e| *e.qp.attr())
            .ok_or(Error::Gone)
    }

    /// The queue pair's state.
    pub fn state(&self) -> QpState {
        self.shared
            .lock()
            .objects
            .qps
            .get(&self.qpn)
            .map_or(QpState::Err, |e| e.qp.state())
    }

    /// The most request packets it may have in flight (IRN's BDP-FC cap, sized for the path
    /// MTU when the queue pair connects; the RoCE modes' 128 unacknowledged PSNs), or `None`
    /// when the mode has no cap.
    pub fn in_flight_cap(&self) -> Option<u32> {
        self.shared
            .lock()
            .objects
            .qps
            .get(&self.qpn)
            .and_then(|e| e.qp.config().recovery.bdp_cap)
    }

    /// The queue pair's counters (packets, retransmissions, NAKs, …).
    pub fn counters(&self) -> Counters {
        self.shared
            .lock()
            .objects
            .qps
            .get(&self.qpn)
            .map_or_else(Counters::default, |e| *e.qp.counters())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        // Its posts' packets still waiting for the doorbell leave now, from its own port,
        // which closes with it.
        core.flush_tx(&self.shared.socks.udp);
        if let Some(e) = core.objects.qps.remove(&self.qpn) {
            // What it had in flight no longer counts against the device's budget (a place
            // it held in the budget's queue is skipped when it comes up).
            core.budget.release(e.charged);
            if core.budget.has_room() {
                self.shared.wake_engine();
            }
            core.release_pd_of(e.pd);
            core.release_port(e.sport);
        }
    }
}
