//! Event channels: a pipe and a queue per channel, kept level-triggered (a byte in the pipe
//! while events wait), and the accounting that keeps an event from naming a freed ID.

use super::*;

/// Queues an event that carries no parameters for `id`.
pub(super) fn post_bare(id: *mut rdma_cm_id, event: u32, status: c_int) {
    post(
        id,
        std::ptr::null_mut(),
        event,
        status,
        Vec::new(),
        no_param(),
    );
}

/// Queues an event for `id` on its channel.
pub(super) fn post(
    id: *mut rdma_cm_id,
    listen_id: *mut rdma_cm_id,
    event: u32,
    status: c_int,
    private: Vec<u8>,
    conn: rdma_conn_param,
) {
    // SAFETY: a live ID (its threads end before it is destroyed); its channel is set when
    // it is created.
    let ch = unsafe { (*Id::from_c(id).c()).channel };
    let mut ev = Box::new(Event {
        c: rdma_cm_event {
            id,
            listen_id,
            event,
            status,
            param: rdma_cm_param { conn },
        },
        private,
    });
    if !ev.private.is_empty() {
        // The boxed event keeps the bytes where they are until it is acknowledged.
        ev.c.param.conn.private_data = ev.private.as_ptr() as *const c_void;
        ev.c.param.conn.private_data_len = ev.private.len().min(255) as u8;
    }
    // SAFETY: the ID's channel, which outlives its IDs (rdma_destroy_event_channel(3)).
    let ch = unsafe { &*(ch as *const Channel) };
    let mut q = ch.queue.lock().unwrap_or_else(|p| p.into_inner());
    q.push_back(Box::into_raw(ev) as usize);
    if q.len() == 1 {
        ch.signal(true);
    }
}

impl Channel {
    /// Keeps the pipe level-triggered, with the queue locked by the caller: one byte in it
    /// while events are queued (`ready`), none once the queue is empty, so the channel's `fd`
    /// polls readable exactly when `rdma_get_cm_event` has an event to give.
    fn signal(&self, ready: bool) {
        let mut b = [1u8];
        // SAFETY: one byte from or into a local array, on the channel's own pipe; the
        // invariant above says a byte is there to read when the queue empties.
        let _ = unsafe {
            if ready {
                libc::write(self.write.as_raw_fd(), b.as_ptr() as *const c_void, 1)
            } else {
                libc::read(self.read.as_raw_fd(), b.as_mut_ptr() as *mut c_void, 1)
            }
        };
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_create_event_channel() -> *mut rdma_event_channel {
    let (read, write) = match crate::device::new_pipe() {
        Ok(p) => p,
        Err(e) => return errno::null(e.raw_os_error().unwrap_or(errno::ENOMEM)),
    };
    let ch = Box::new(Channel {
        c: rdma_event_channel {
            fd: read.as_raw_fd(),
        },
        read,
        write,
        queue: Mutex::new(VecDeque::new()),
    });
    Box::into_raw(ch) as *mut rdma_event_channel
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    if ch.is_null() {
        return;
    }
    // SAFETY: a channel rdma_create_event_channel returned; its IDs are gone but for those of
    // connection requests still queued, which the program never saw.
    let c = unsafe { &*(ch as *const Channel) };
    let pending: Vec<usize> = c
        .queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .collect();
    for e in pending {
        // SAFETY: taken out of the queue, so owned here.
        let ev = unsafe { Box::from_raw(e as *mut Event) };
        if ev.c.event == cm_event::CONNECT_REQUEST {
            // SAFETY: the request's new ID, live and unknown to the program; the channel is
            // still here for it.
            unsafe { irn_rdma_destroy_id(ev.c.id) };
        }
    }
    // SAFETY: destroyed once, nothing queued on it any more.
    drop(unsafe { Box::from_raw(ch as *mut Channel) });
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    if ch.is_null() || out.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: a live channel.
    let c = unsafe { &*(ch as *const Channel) };
    let fd = c.c.fd;
    loop {
        {
            let mut queue = c.queue.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(ev) = queue.pop_front() {
                if queue.is_empty() {
                    c.signal(false);
                }
                // Counted against its IDs before the queue is let go: destroying an ID
                // purges the queue under this lock, then waits for what was counted.
                // SAFETY: a queued event, whose IDs are live (destroying one purges its
                // events).
                unsafe { charge(ev as *mut Event, 1) };
                drop(queue);
                // SAFETY: the caller's out pointer.
                unsafe { out.write(ev as *mut rdma_cm_event) };
                return 0;
            }
        }
        // Nothing queued: a non-blocking channel says so (EAGAIN, as librdmacm's), a
        // blocking one waits for the pipe to become readable.
        // SAFETY: reading the descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0 {
            errno::set(libc::EAGAIN);
            return -1;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of our own.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return -1;
        }
        if pfd.revents & (libc::POLLHUP | libc::POLLNVAL | libc::POLLERR) != 0 {
            // The channel was destroyed under a thread waiting on it (rping's CM thread at
            // exit): it waits on, as it would on rdma_cm's device file, without touching the
            // channel again.
            loop {
                std::thread::park();
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_ack_cm_event(ev: *mut rdma_cm_event) -> c_int {
    if ev.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: an event rdma_get_cm_event returned, acknowledged once; its IDs wait for it.
    unsafe { charge(ev as *mut Event, -1) };
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(ev as *mut Event) });
    0
}

/// Counts an event for (`+1`) or against (`-1`) the IDs it names.
///
/// # Safety
/// `ev` is an event of this library's whose IDs are live.
pub(super) unsafe fn charge(ev: *mut Event, by: i32) {
    // SAFETY: the caller's contract.
    let (id, listen, kind) = unsafe { ((*ev).c.id, (*ev).c.listen_id, (*ev).c.event) };
    // A connection request counts against its listener only, as librdmacm's does: a program
    // may reject and destroy the request's new ID before acknowledging the event.
    let id = if kind == cm_event::CONNECT_REQUEST {
        std::ptr::null_mut()
    } else {
        id
    };
    for i in [id, listen] {
        if i.is_null() {
            continue;
        }
        // SAFETY: a live ID (the caller's contract).
        let i = unsafe { Id::from_c(i) };
        let mut n = i.taken();
        *n = n.saturating_add_signed(by);
        i.acked.notify_all();
    }
}

/// Takes out of `ch`'s queue the events that name `id`; frees them, and destroys the new ID
/// of a connection request that `id` was listening for (the program never saw it).
///
/// # Safety
/// `ch` is the live channel of the live ID `id`.
pub(super) unsafe fn purge(ch: *mut rdma_event_channel, id: *mut rdma_cm_id) {
    // SAFETY: the caller's contract.
    let c = unsafe { &*(ch as *const Channel) };
    let gone: Vec<usize> = {
        let mut q = c.queue.lock().unwrap_or_else(|p| p.into_inner());
        let had = !q.is_empty();
        let (gone, keep): (Vec<usize>, Vec<usize>) = q.drain(..).partition(|&e| {
            // SAFETY: queued events are live boxes of this library's.
            let ev = unsafe { &(*(e as *const Event)).c };
            ev.id == id || ev.listen_id == id
        });
        q.extend(keep);
        if had && q.is_empty() {
            c.signal(false);
        }
        gone
    };
    for e in gone {
        // SAFETY: taken out of the queue above, so owned here.
        let ev = unsafe { Box::from_raw(e as *mut Event) };
        if ev.c.event == cm_event::CONNECT_REQUEST && ev.c.listen_id == id {
            // SAFETY: the request's new ID, live and unknown to the program.
            unsafe { irn_rdma_destroy_id(ev.c.id) };
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_event_str(e: u32) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        RDMA_CM_EVENT_NAMES
            .iter()
            .map(|s| std::ffi::CString::new(*s).expect("no NUL"))
            .collect()
    });
    names
        .get(e as usize)
        .map_or(c"UNKNOWN EVENT".as_ptr(), |n| n.as_ptr())
}
