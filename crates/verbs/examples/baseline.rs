//! Kernel baselines for the irn-verbs benchmark (`scripts/bench-verbs`), measured on the same
//! loopback in the same run: one TCP stream's bandwidth, a UDP ping-pong's round trip and a UDP
//! blaster's datagram rate, each in the kernel's best form for the mode it is set beside.
//!
//! `cargo run --release -p irn-verbs --example baseline -- tcp MB [WRITE]` prints MB/s (2^20)
//! of one stream moving MB MiB in `write(2)`s of WRITE bytes (default 1 MiB; iperf3 writes
//! 128 KiB, perftest's Write messages are 64 KiB — the size moves the kernel's rate by a
//! quarter here, docs/BENCHMARKS.md), the receiver reading 1 MiB at a time;
//! `... -- udp ITERS SIZE [busy] [acked]` prints the median round trip and its 99th percentile
//! in µs: a blocking ping-pong (each end sleeps in `recvfrom`), or with `busy` both ends
//! spinning on non-blocking sockets (the form a busy-polled RDMA round trip compares with);
//! with `acked` each message goes with an acknowledgement of the one before it, a 20-byte
//! datagram (a RoCE ACK's BTH, AETH and ICRC) sent in the same `sendmmsg(2)` and received in
//! the same `recvmmsg(2)` loop: the kernel's part of a reliable-connected Write ping-pong over
//! UDP, which moves the responder's ACK beside every message, and so its floor;
//! `... -- blast COUNT SIZE [gso] [busy]` prints the datagrams per second (millions) a UDP
//! blaster moves: one thread sends COUNT datagrams of SIZE bytes, 64 messages per
//! `sendmmsg(2)`, another receives them 64 per `recvmmsg(2)`; with `gso` each message carries
//! up to 64 datagrams cut by the kernel (`UDP_SEGMENT`) and the receiver takes them coalesced
//! (`UDP_GRO`), with `busy` the receiver spins instead of sleeping — both together are the
//! kernel's best datagram rate; with `crc` the sender reads every datagram for a CRC-32 before
//! it leaves (the ICRC every RoCE packet carries, IBTA Annex A17.3.3, which a sender must
//! compute over each packet), and with `verify` the receiver does too (the check a RoCE
//! receiver makes where it can see the headers the ICRC covers): the kernel's best with a RoCE
//! transport's one unavoidable pass over each packet, and nothing else of a transport's work.
//! The rate is what arrived over the time it took (datagrams the
//! receiver's socket dropped do not count; `BLAST_DEBUG=1` prints how many were sent and
//! received);
//! `... -- stream MB [SEG] [place] [crc] [verify]` prints MB/s (2^20) of payload a UDP stream
//! moves in the form a Write of 64 KiB messages takes on the UDP path (GSO messages of
//! SEG-byte datagrams, by default 4 112: BTH, a 4 096-byte MTU's payload and the ICRC;
//! received coalesced through GRO by a spinning receiver); with `place` each datagram's payload
//! — SEG less a 16-byte header and trailer — is copied to its place in a 64 MiB region, as a
//! receiver placing RDMA Writes does; with `crc` the sender reads every datagram for a CRC-32
//! before it leaves (the ICRC), and with `verify` the receiver does too (irn's raw path verifies
//! every ICRC; its IPv4 UDP path cannot). The sender keeps at most 4 MiB (or half the receive
//! buffer it got) ahead of what the receiver has taken — an atomic between the two threads:
//! flow control at no cost in packets, unlike a transport's ACKs — so that nothing is dropped.
//! What it prints is a floor's rate: the kernel's part of a Write stream over UDP, and of each
//! byte's handling only the copy and the reads named.

// The blaster calls `sendmmsg(2)` / `recvmmsg(2)` directly, as the device's own `net::sys`
// does: a kernel baseline of those calls, with no wrapper between.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let flag = |name: &str| args.iter().skip(2).any(|a| a == name);
    match args.get(1).map(String::as_str) {
        Some("tcp") => {
            let mb = arg(2, 2048);
            let chunk = (arg(3, 1 << 20) as usize).clamp(1, 1 << 20);
            let l = TcpListener::bind("127.0.0.1:0")?;
            let addr = l.local_addr()?;
            let rx = std::thread::spawn(move || -> std::io::Result<u64> {
                let (mut s, _) = l.accept()?;
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0u64;
                loop {
                    let k = s.read(&mut buf)?;
                    if k == 0 {
                        return Ok(n);
                    }
                    n += k as u64;
                }
            });
            let mut s = TcpStream::connect(addr)?;
            let buf = vec![7u8; chunk];
            let t = Instant::now();
            let mut left = mb << 20;
            while left > 0 {
                let k = left.min(chunk as u64) as usize;
                s.write_all(&buf[..k])?;
                left -= k as u64;
            }
            drop(s);
            let n = rx
                .join()
                .map_err(|_| std::io::Error::other("receiver panicked"))??;
            println!("{:.2}", n as f64 / t.elapsed().as_secs_f64() / 1048576.0);
        }
        Some("udp") if flag("acked") => {
            let (iters, size) = (arg(2, 10000), arg(3, 64) as usize);
            let (p50, p99) = acked_pingpong(iters, size, flag("busy"))?;
            println!("{p50:.2} {p99:.2}");
        }
        Some("udp") => {
            let (iters, size) = (arg(2, 10000), arg(3, 64) as usize);
            let busy = flag("busy");
            let a = UdpSocket::bind("127.0.0.1:0")?;
            let b = UdpSocket::bind("127.0.0.1:0")?;
            a.set_nonblocking(busy)?;
            b.set_nonblocking(busy)?;
            let ba = b.local_addr()?;
            let echo = std::thread::spawn(move || -> std::io::Result<()> {
                let mut buf = vec![0u8; 65536];
                for _ in 0..iters {
                    let (n, from) = recv_from(&b, &mut buf)?;
                    b.send_to(&buf[..n], from)?;
                }
                Ok(())
            });
            let msg = vec![1u8; size];
            let mut buf = vec![0u8; 65536];
            let (p50, p99) = round_trips(iters, || {
                a.send_to(&msg, ba)?;
                recv_from(&a, &mut buf).map(|_| ())
            })?;
            echo.join()
                .map_err(|_| std::io::Error::other("echo panicked"))??;
            println!("{p50:.2} {p99:.2}");
        }
        Some("blast") => {
            let (count, size) = (arg(2, 2_000_000), arg(3, 64) as usize);
            println!(
                "{:.3}",
                blast(
                    count,
                    size,
                    flag("gso"),
                    flag("busy"),
                    Icrc {
                        send: flag("crc"),
                        verify: flag("verify"),
                    }
                )? / 1e6
            );
        }
        Some("stream") => {
            let (mb, seg) = (arg(2, 2048), arg(3, 4112) as usize);
            let work = Work {
                place: flag("place"),
                crc: flag("crc"),
                verify: flag("verify"),
            };
            println!("{:.2}", stream(mb, seg, work)?);
        }
        _ => eprintln!(
            "usage: baseline tcp MB [WRITE] | baseline udp ITERS SIZE [busy] [acked] | \
             baseline blast COUNT SIZE [gso] [busy] [crc] [verify] | baseline stream MB [SEG] [place] [crc] [verify]"
        ),
    }
    Ok(())
}

/// One datagram: sleeping in `recvfrom` on a blocking socket, spinning on a non-blocking one.
fn recv_from(s: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, std::net::SocketAddr)> {
    loop {
        match s.recv_from(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            r => return r,
        }
    }
}

/// A RoCE ACK's UDP payload: BTH (12 bytes), AETH (4) and ICRC (4).
const ACK_BYTES: usize = 20;

/// Two datagrams to `to` (an IPv4 address) in one `sendmmsg(2)`: an ACK-sized one, then `msg`.
/// The socket is not connected and each message names its destination, as the plain
/// ping-pong's `send_to` and irn's device do.
fn send_acked(s: &UdpSocket, to: std::net::SocketAddr, msg: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let std::net::SocketAddr::V4(to) = to else {
        return Err(std::io::Error::other("the acked ping-pong runs on IPv4"));
    };
    // SAFETY: sockaddr_in is plain data; all-zero is valid before the fields are set.
    let mut name: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    name.sin_family = libc::AF_INET as libc::sa_family_t;
    name.sin_port = to.port().to_be();
    name.sin_addr.s_addr = u32::from(*to.ip()).to_be();
    let ack = [0u8; ACK_BYTES];
    let mut iov = [
        libc::iovec {
            iov_base: ack.as_ptr() as *mut libc::c_void,
            iov_len: ack.len(),
        },
        libc::iovec {
            iov_base: msg.as_ptr() as *mut libc::c_void,
            iov_len: msg.len(),
        },
    ];
    // `iov` and `name` outlive the call.
    let mut msgs = headers(&mut iov, Some(&mut name));
    let mut sent = 0;
    while sent < 2 {
        // SAFETY: `msgs[sent..]` are valid headers (above).
        let n = unsafe {
            libc::sendmmsg(
                s.as_raw_fd(),
                msgs.as_mut_ptr().add(sent),
                (2 - sent) as u32,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            continue;
        }
        sent += n as usize;
    }
    Ok(())
}

/// Receives the two datagrams `send_acked` sends, with `recvmmsg(2)`: spinning on a
/// non-blocking socket, or on a blocking one sleeping until both are there (no
/// `MSG_WAITFORONE`: a blocking call waits for as many as it asks for).
fn recv_acked(s: &UdpSocket, bufs: &mut [Vec<u8>; 2]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut iov = iovecs(bufs);
    // `iov` and `bufs` outlive the calls.
    let mut msgs = headers(&mut iov, None);
    let mut got = 0;
    while got < 2 {
        // SAFETY: `msgs[got..]` are valid headers over the buffers not yet filled.
        let n = unsafe {
            libc::recvmmsg(
                s.as_raw_fd(),
                msgs.as_mut_ptr().add(got),
                (2 - got) as u32,
                0,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            std::hint::spin_loop();
            continue;
        }
        got += n as usize;
    }
    Ok(())
}

/// The `acked` ping-pong: median and 99th-percentile round trip, µs.
fn acked_pingpong(iters: u64, size: usize, busy: bool) -> std::io::Result<(f64, f64)> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    let (to_a, to_b) = (a.local_addr()?, b.local_addr()?);
    a.set_nonblocking(busy)?;
    b.set_nonblocking(busy)?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut bufs = [vec![0u8; 65536], vec![0u8; 65536]];
        let msg = vec![2u8; size];
        for _ in 0..iters {
            recv_acked(&b, &mut bufs)?;
            send_acked(&b, to_a, &msg)?;
        }
        Ok(())
    });
    let msg = vec![1u8; size];
    let mut bufs = [vec![0u8; 65536], vec![0u8; 65536]];
    let times = round_trips(iters, || {
        send_acked(&a, to_b, &msg)?;
        recv_acked(&a, &mut bufs)
    })?;
    echo.join()
        .map_err(|_| std::io::Error::other("echo panicked"))??;
    Ok(times)
}

/// An iovec over each of `bufs`, whole.
fn iovecs(bufs: &mut [Vec<u8>]) -> Vec<libc::iovec> {
    bufs.iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect()
}

/// `n` iovecs over the whole of `buf`, for sending it `n` times in one call.
fn repeated(buf: &[u8], n: usize) -> Vec<libc::iovec> {
    (0..n)
        .map(|_| libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        })
        .collect()
}

/// One `recvmmsg(2)` into `msgs` from `s`, not waiting past what the socket's mode says: the
/// messages taken, or 0 or less when none.
///
/// # Safety
///
/// Every header of `msgs` points at iovecs (and each iovec at a buffer of its length) that are
/// alive and unmoved for the call, as `headers` builds them over `iovecs`: the kernel writes
/// through them.
unsafe fn recv_batch(s: &UdpSocket, msgs: &mut [libc::mmsghdr]) -> libc::c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: the caller's promise covers the headers; at most `msgs.len()` are filled.
    unsafe {
        libc::recvmmsg(
            s.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            0,
            std::ptr::null_mut(),
        )
    }
}

/// One `sendmmsg(2)` / `recvmmsg(2)` header per iovec of `iov`, in order, each naming `name`
/// when given (no control data). The headers point at `iov` and `name`: the caller keeps both,
/// and what the iovecs point at, alive and in place while it uses them.
fn headers(
    iov: &mut [libc::iovec],
    mut name: Option<&mut libc::sockaddr_in>,
) -> Vec<libc::mmsghdr> {
    iov.iter_mut()
        .map(|v| {
            // SAFETY: mmsghdr is plain data; all-zero is a valid empty header (no name, no
            // control).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            if let Some(n) = name.as_deref_mut() {
                m.msg_hdr.msg_name = std::ptr::from_mut(n).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            m
        })
        .collect()
}

/// Times `iters` round trips of `one`: the median and the 99th percentile, µs.
fn round_trips(
    iters: u64,
    mut one: impl FnMut() -> std::io::Result<()>,
) -> std::io::Result<(f64, f64)> {
    if iters == 0 {
        return Err(std::io::Error::other("ITERS must be at least 1"));
    }
    let mut rtt = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t = Instant::now();
        one()?;
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
    }
    rtt.sort_by(f64::total_cmp);
    let p99 = rtt[(rtt.len() * 99 / 100).min(rtt.len() - 1)];
    Ok((rtt[rtt.len() / 2], p99))
}

/// `getsockopt(fd, level, name)` of an int-sized option of a socket the caller owns; 0 if it
/// fails.
fn get_int(fd: std::os::fd::RawFd, level: libc::c_int, name: libc::c_int) -> libc::c_int {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a plain getsockopt into an int-sized value whose length is passed with it.
    let r = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast(), &mut len) };
    if r == 0 {
        v
    } else {
        0
    }
}

/// `setsockopt(fd, level, name, int)` on a socket the caller owns.
fn set_int(fd: std::os::fd::RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    // SAFETY: a plain setsockopt with an int-sized value on an open socket.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Linux's `UDP_SEGMENT` and `UDP_GRO` (include/uapi/linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Which ends of the blaster read every datagram for its ICRC (a CRC-32 over it).
#[derive(Clone, Copy)]
struct Icrc {
    /// The sender, before the datagram leaves.
    send: bool,
    /// The receiver, once it has arrived.
    verify: bool,
}

/// The UDP blaster: datagrams per second received. With `gso`, each sent message carries up
/// to 64 datagrams (at most 64 KiB) and the receiver takes them coalesced; with `busy`, the
/// receiver spins on a non-blocking socket; `icrc` says which ends read each datagram for
/// its CRC.
fn blast(count: u64, size: usize, gso: bool, busy: bool, icrc: Icrc) -> std::io::Result<f64> {
    use std::os::fd::AsRawFd;
    use std::time::Duration;
    const BATCH: usize = 64;
    // Datagrams per message: one, or as many as GSO takes in one (64 and under 64 KiB).
    let segs = if gso {
        (65000 / size.max(1)).clamp(1, 64)
    } else {
        1
    };
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    tx.connect(rx.local_addr()?)?;
    set_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    if gso {
        set_int(
            tx.as_raw_fd(),
            libc::SOL_UDP,
            UDP_SEGMENT,
            size as libc::c_int,
        );
        set_int(rx.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1);
    }
    if busy {
        rx.set_nonblocking(true)?;
    } else {
        rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    }
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
        let mut bufs = vec![vec![0u8; 65536]; BATCH];
        // `iov` points into `bufs`, and both outlive every call.
        let mut iov = iovecs(&mut bufs);
        let mut msgs = headers(&mut iov, None);
        let (mut got, mut first, mut last) = (0u64, None, Instant::now());
        let mut check = 0u32;
        let started = Instant::now();
        while got < count {
            // SAFETY: `msgs` holds BATCH headers built by `headers` over `iov`, which points
            // into `bufs`; all three live, unmoved, until the loop ends.
            let n = unsafe { recv_batch(&rx, &mut msgs) };
            if n <= 0 {
                // Nothing for 200 ms after the last datagram (5 s before the first): the
                // sender is done and the rest was dropped. Sleeping, the read timeout says so.
                let idle = first.map_or(started.elapsed(), |_| last.elapsed());
                let limit = Duration::from_millis(if first.is_some() { 200 } else { 5000 });
                if busy && idle < limit {
                    std::hint::spin_loop();
                    continue;
                }
                break;
            }
            first.get_or_insert_with(Instant::now);
            last = Instant::now();
            // A coalesced message holds ⌈len / size⌉ datagrams (the last may be short).
            for (m, buf) in msgs[..n as usize].iter().zip(&bufs) {
                let message = &buf[..m.msg_len as usize];
                got += message.len().div_ceil(size.max(1)) as u64;
                if icrc.verify {
                    for d in message.chunks(size.max(1)) {
                        check ^= crc32fast::hash(d);
                    }
                }
            }
        }
        std::hint::black_box(check);
        let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
        Ok((got, secs))
    });
    let payload = vec![7u8; size * segs];
    let mut iov = repeated(&payload, BATCH);
    // The socket is connected, so no name is needed; `iov` and `payload` outlive the calls.
    let mut msgs = headers(&mut iov, None);
    let mut sent = 0u64;
    let mut sum = 0u32;
    let per_call = (BATCH * segs) as u64;
    while sent < count {
        let k = BATCH.min((count - sent).div_ceil(segs as u64) as usize);
        if icrc.send {
            // The ICRC of every datagram the call carries, computed before it leaves.
            for _ in 0..k * segs {
                sum ^= crc32fast::hash(std::hint::black_box(&payload[..size]));
            }
        }
        // SAFETY: `msgs[..k]` are valid headers whose iovecs point into `payload`.
        let n = unsafe { libc::sendmmsg(tx.as_raw_fd(), msgs.as_mut_ptr(), k as u32, 0) };
        if n > 0 {
            sent += (n as u64 * segs as u64).min(per_call);
        }
    }
    std::hint::black_box(sum);
    let (got, secs) = receiver
        .join()
        .map_err(|_| std::io::Error::other("receiver panicked"))??;
    if std::env::var_os("BLAST_DEBUG").is_some() {
        eprintln!("sent {sent}, received {got} in {secs:.3} s");
    }
    Ok(if secs > 0.0 { got as f64 / secs } else { 0.0 })
}

/// What the stream does with each datagram besides sending and receiving it.
#[derive(Clone, Copy)]
struct Work {
    /// The receiver copies its payload to its place in the region.
    place: bool,
    /// The sender reads it for a CRC-32 (the ICRC's pass over the packet) before it leaves.
    crc: bool,
    /// The receiver reads it for a CRC-32 too (verifying the ICRC, as irn's raw path does; its
    /// IPv4 UDP path cannot: a UDP socket hides the IP identification the ICRC covers).
    verify: bool,
}

/// The UDP stream floor of a Write of 64 KiB messages: payload MB/s received (see the
/// module's doc).
fn stream(mb: u64, seg: usize, work: Work) -> std::io::Result<f64> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const BATCH: usize = 16;
    const HDR: usize = 12;
    const TRAILER: usize = 4;
    const AHEAD: u64 = 4 << 20;
    const REGION: usize = 64 << 20;
    if seg <= HDR + TRAILER || seg > 65000 {
        return Err(std::io::Error::other("SEG must be 17 to 65000 bytes"));
    }
    let payload = seg - HDR - TRAILER;
    let segs = (65000 / seg).clamp(1, 64);
    let total = (mb << 20).div_ceil(payload as u64);
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    tx.connect(rx.local_addr()?)?;
    // Room for what the sender may have ahead: as much as `net.core.rmem_max` allows, past it
    // as root; the sender then stays within half of what the socket got (the kernel reports
    // twice the bytes it accounts packets against), so that nothing is dropped.
    set_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 32 << 20);
    set_int(
        rx.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        32 << 20,
    );
    let room = get_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).max(0) as u64 / 2;
    let ahead = (AHEAD.min(room) / seg as u64).max(1);
    set_int(
        tx.as_raw_fd(),
        libc::SOL_UDP,
        UDP_SEGMENT,
        seg as libc::c_int,
    );
    set_int(rx.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1);
    rx.set_nonblocking(true)?;
    // Datagrams the receiver has taken: the sender stays within `ahead` of it.
    let taken = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&taken);
    // The receiver has stopped (all arrived, or 200 ms without a datagram: some were dropped).
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
        let mut bufs = vec![vec![0u8; 65536]; BATCH];
        let mut region = vec![0u8; REGION];
        // `iov` points into `bufs`, and both outlive every call.
        let mut iov = iovecs(&mut bufs);
        let mut msgs = headers(&mut iov, None);
        let (mut got, mut at, mut check) = (0u64, 0usize, 0u32);
        let mut first = None;
        let mut last = Instant::now();
        while got < total {
            // SAFETY: `msgs` was built by `headers` over `iov`, which points into `bufs`; all
            // three live, unmoved, until the loop ends.
            let n = unsafe { recv_batch(&rx, &mut msgs) };
            if n <= 0 {
                let limit = if first.is_some() { 200 } else { 5000 };
                if last.elapsed().as_millis() > limit {
                    break;
                }
                std::hint::spin_loop();
                continue;
            }
            last = Instant::now();
            first.get_or_insert(last);
            for (m, buf) in msgs[..n as usize].iter().zip(&bufs) {
                for d in buf[..m.msg_len as usize].chunks(seg) {
                    let body = &d[HDR.min(d.len())..d.len().saturating_sub(TRAILER)];
                    if work.place {
                        if at + body.len() > REGION {
                            at = 0;
                        }
                        region[at..at + body.len()].copy_from_slice(body);
                        at += body.len();
                    }
                    if work.verify {
                        check ^= crc32fast::hash(d);
                    }
                    got += 1;
                }
            }
            seen.store(got, Ordering::Release);
        }
        stopped.store(true, Ordering::Release);
        let secs = first.map_or(0.0, |f: Instant| last.duration_since(f).as_secs_f64());
        std::hint::black_box((check, &region));
        Ok((got, secs))
    });
    let data = vec![7u8; seg * segs];
    let mut iov = repeated(&data, BATCH);
    let (mut sent, mut sum) = (0u64, 0u32);
    while sent < total && !stop.load(Ordering::Acquire) {
        let room = (taken.load(Ordering::Acquire) + ahead).saturating_sub(sent);
        if room == 0 {
            std::thread::yield_now();
            continue;
        }
        let want = room.min(total - sent);
        let k = (want.div_ceil(segs as u64) as usize).clamp(1, BATCH);
        // Each message carries `segs` datagrams, the last of the call what is left.
        for (i, v) in iov.iter_mut().enumerate() {
            let before = (i * segs) as u64;
            v.iov_len = seg * want.saturating_sub(before).min(segs as u64) as usize;
        }
        // Built after the lengths are set, so that the headers point at `iov` as it is; the
        // socket is connected, so no name is needed.
        let mut msgs = headers(&mut iov, None);
        // SAFETY: `msgs[..k]` are valid headers whose iovecs point into `data`, and both
        // outlive the call.
        let n = unsafe { libc::sendmmsg(tx.as_raw_fd(), msgs.as_mut_ptr(), k as u32, 0) };
        if n <= 0 {
            continue;
        }
        for v in &iov[..n as usize] {
            sent += (v.iov_len / seg) as u64;
            if work.crc {
                // The sender's ICRC of every datagram that left.
                for d in data[..v.iov_len].chunks(seg) {
                    sum ^= crc32fast::hash(d);
                }
            }
        }
    }
    std::hint::black_box(sum);
    let (got, secs) = receiver
        .join()
        .map_err(|_| std::io::Error::other("receiver panicked"))??;
    if got < total {
        eprintln!("stream: {got} of {total} datagrams arrived (the rest were dropped)");
    }
    Ok(if secs > 0.0 {
        (got * payload as u64) as f64 / secs / 1048576.0
    } else {
        0.0
    })
}
