//! `irn rping -s|-c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V]`: rdma-core's `rping`
//! (`librdmacm/examples/rping.c`) on irn-verbs, connected through the RDMA CM
//! ([`irn_verbs::cm`]), so that either end may be rdma-core's tool.
//!
//! Each ping (the client's `rping_test_client`, the server's `rping_test_server`): the client
//! fills its start buffer (`"rdma-ping-%d: "` then letters `A`–`z` rotating by one per ping,
//! NUL-terminated) and Sends its address, rkey and size (`struct rping_rdma_info`: big-endian
//! u64, u32, u32); the server RDMA-Reads it into its buffer and Sends a go-ahead; the client
//! Sends the address of its second buffer; the server RDMA-Writes the data there and Sends a
//! go-ahead; the client compares both buffers (`-V`) and prints the data (`-v`). After
//! `COUNT` pings (0: until interrupted) the client disconnects (DREQ / DREP); the server
//! serves that one connection and exits.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use crate::error::{Context, Result};
use crate::{bail, usage};
use irn_verbs::cm::{CmConfig, CmConnection, CmListener};
use irn_verbs::{
    Access, Cq, Device, Mr, Qp, QpAttr, QpInit, QpMode, RecvWr, Remote, SendOp, SendWr, Wc,
    WcOpcode, WcStatus,
};

use crate::link::{device_config, LinkArgs};

/// `struct rping_rdma_info`.
const INFO_LEN: u32 = 16;
/// rping's size limits (`RPING_MIN_BUFSIZE`, `RPING_BUFSIZE - 1`).
const MIN_SIZE: u32 = 26;
const MAX_SIZE: u32 = 64 * 1024 - 1;
/// How long either end waits for the other's next step.
const STALL: Duration = Duration::from_secs(30);

/// `irn rping` flags (rping's own, plus irn's device flags).
#[derive(clap::Args, Debug)]
pub struct RpingArgs {
    /// Server side.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server's to connect to (client), the one to listen on (server).
    #[arg(short = 'a')]
    addr: String,
    /// The client's source address (default: the one the route to the server takes).
    #[arg(short = 'I')]
    source: Option<IpAddr>,
    /// rdma_cm port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Pings (0: until interrupted).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = 64)]
    size: u32,
    /// Print the ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate the ping data (client).
    #[arg(short = 'V')]
    validate: bool,
    /// Debug output (accepted; irn prints its CM steps with it).
    #[arg(short = 'd')]
    debug: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// One end's buffers and queue pair.
struct End {
    dev: Device,
    cq: Cq,
    qp: Qp,
    recv: Mr,
    send: Mr,
    /// Client: the start buffer; server: the buffer it reads into and writes from.
    a: Mr,
    /// Client: the buffer the server writes into.
    b: Mr,
    attr: QpAttr,
}

impl End {
    fn open(ip: IpAddr, args: &RpingArgs) -> Result<End> {
        let dev = Device::open(device_config(ip, args.link.udp_port, &args.link)?)
            .with_context(|| format!("opening a device on {ip}"))?;
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(16)?;
        let qp = pd.create_qp(
            &cq,
            &cq,
            QpInit {
                mode: QpMode::Roce,
                max_send_wr: 4,
                max_recv_wr: 4,
                ..QpInit::default()
            },
        )?;
        let attr = QpAttr {
            path_mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            access: Access::ALL,
            ..QpAttr::default()
        };
        qp.init(&attr)?;
        let end = End {
            recv: pd.reg_mr(INFO_LEN as usize, Access::LOCAL_WRITE)?,
            send: pd.reg_mr(INFO_LEN as usize, Access::LOCAL_WRITE)?,
            a: pd.reg_mr(args.size as usize, Access::ALL)?,
            b: pd.reg_mr(args.size as usize, Access::ALL)?,
            dev,
            cq,
            qp,
            attr,
        };
        // As rping: the first receive is posted before the connection.
        end.post_recv()?;
        Ok(end)
    }

    fn post_recv(&self) -> Result<()> {
        self.qp.post_recv(RecvWr {
            wr_id: 0,
            sg_list: irn_verbs::sgl![self.recv.sge(0, INFO_LEN)],
        })?;
        Ok(())
    }

    /// Sends an `rping_rdma_info` for `mr` (the go-ahead of a server carries its own).
    fn send_info(&self, mr: &Mr, size: u32) -> Result<()> {
        let mut info = [0u8; INFO_LEN as usize];
        info[..8].copy_from_slice(&mr.addr().to_be_bytes());
        info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
        info[12..].copy_from_slice(&size.to_be_bytes());
        self.send.write(0, &info)?;
        self.qp.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: irn_verbs::sgl![self.send.sge(0, INFO_LEN)],
            signaled: true,
            fence: false,
            solicited: false,
        })?;
        Ok(())
    }

    fn post(&self, op: SendOp, from: &Mr, len: u32) -> Result<()> {
        self.qp.post_send(SendWr {
            wr_id: 2,
            op,
            sg_list: irn_verbs::sgl![from.sge(0, len)],
            signaled: true,
            fence: false,
            solicited: false,
        })?;
        Ok(())
    }

    /// The next completion; `None` once the peer has disconnected (server).
    fn next(&self, conn: &mut Option<&mut CmConnection>) -> Result<Option<Wc>> {
        let since = Instant::now();
        loop {
            if let Some(wc) = self.cq.wait(Duration::from_millis(20))? {
                if wc.status != WcStatus::Success {
                    bail!(
                        "completion error {} ({}) for wr_id {}",
                        wc.status,
                        wc.status.ibv_number(),
                        wc.wr_id
                    );
                }
                return Ok(Some(wc));
            }
            if let Some(c) = conn.as_deref_mut() {
                if c.poll_disconnect()? {
                    return Ok(None);
                }
            }
            if since.elapsed() > STALL {
                bail!("nothing from the peer for {STALL:?}");
            }
        }
    }

    /// Waits for the completion of the work request just posted and for the peer's next
    /// message (in either order); reposts the receive and returns the message.
    fn exchange(&self) -> Result<[u8; INFO_LEN as usize]> {
        let (mut sent, mut got) = (false, None);
        while !sent || got.is_none() {
            let wc = self
                .next(&mut None)?
                .expect("only the server sees disconnects");
            if wc.opcode == WcOpcode::Recv {
                got = Some(self.take_info(&wc)?);
            } else {
                sent = true;
            }
        }
        Ok(got.expect("received"))
    }

    fn take_info(&self, wc: &Wc) -> Result<[u8; INFO_LEN as usize]> {
        if wc.byte_len != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        let mut info = [0u8; INFO_LEN as usize];
        self.recv.read(0, &mut info)?;
        self.post_recv()?;
        Ok(info)
    }
}

/// The text of a NUL-terminated buffer.
fn text(mr: &Mr, size: u32) -> Result<String> {
    let mut b = vec![0u8; size as usize];
    mr.read(0, &mut b)?;
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    Ok(String::from_utf8_lossy(&b[..end]).into_owned())
}

/// The client's ping `ping` (rping's pattern), `start` its first letter.
fn ping_data(ping: u64, start: u8, size: u32) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size as usize);
    let mut c = start;
    while b.len() < size as usize {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

pub fn run(args: RpingArgs) -> Result<bool> {
    args.link.check()?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&args.size) {
        usage!(
            "Invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
            args.size
        );
    }
    if args.server == args.client {
        usage!("give -s (server) or -c (client)");
    }
    let addr: SocketAddr = (crate::link::unbracket(&args.addr), args.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", args.addr))?
        .next()
        .with_context(|| format!("{} has no address", args.addr))?;
    let cfg = CmConfig {
        peer_port: args.link.udp_port,
        ..CmConfig::default()
    };
    if args.client {
        client(&args, addr, cfg)
    } else {
        server(&args, addr.ip(), cfg)
    }
}

fn client(args: &RpingArgs, server: SocketAddr, cfg: CmConfig) -> Result<bool> {
    // The address the route to the server leaves from (rping's rdma_resolve_addr).
    let source = match args.source {
        Some(ip) => ip,
        None => {
            let any: SocketAddr = if server.is_ipv4() {
                SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0))
            } else {
                SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
            };
            let probe = UdpSocket::bind(any)?;
            probe.connect(SocketAddr::new(server.ip(), args.link.udp_port))?;
            probe.local_addr()?.ip()
        }
    };
    let end = End::open(source, args)?;
    let r = client_pings(args, &end, server, cfg);
    if args.link.counters {
        println!("qp counters: {:?}", end.qp.counters());
        println!("device counters: {:?}", end.dev.counters());
    }
    r
}

fn client_pings(args: &RpingArgs, end: &End, server: SocketAddr, cfg: CmConfig) -> Result<bool> {
    // Tried again while refused (nothing listens yet), as perftest's client does: a client
    // started just before its server still connects. A peer that does not answer at all
    // fails after the CM's own REQ retries, as before.
    let conn = crate::cm::connect_retrying(
        &end.dev,
        &end.qp,
        &end.attr,
        server,
        cfg,
        crate::cm::CONNECT_TRIES,
        false,
    )?;
    if args.debug {
        eprintln!(
            "connected to {} (QP 0x{:06x})",
            conn.peer(),
            conn.remote_qpn()
        );
    }
    let mut start = 65u8;
    let mut ping = 0u64;
    let mut ok = true;
    while args.count == 0 || ping < args.count {
        let data = ping_data(ping, start, args.size);
        start = if start >= 122 { 65 } else { start + 1 };
        end.a.write(0, &data)?;
        end.b.write(0, &vec![0u8; args.size as usize])?;
        // The start buffer's address: the server reads it, then says go ahead.
        end.send_info(&end.a, args.size)?;
        end.exchange()?;
        // The buffer to write into: the server writes, then says go ahead.
        end.send_info(&end.b, args.size)?;
        end.exchange()?;
        let mut got = vec![0u8; args.size as usize];
        end.b.read(0, &mut got)?;
        if args.validate && got != data {
            eprintln!("data mismatch!");
            ok = false;
            break;
        }
        if args.verbose {
            println!("ping data: {}", text(&end.b, args.size)?);
        }
        ping += 1;
    }
    if !conn.disconnect().context("disconnecting")? && args.debug {
        eprintln!("the server did not answer the disconnect request");
    }
    Ok(ok)
}

fn server(args: &RpingArgs, ip: IpAddr, cfg: CmConfig) -> Result<bool> {
    if ip.is_unspecified() {
        usage!("-a: irn's server binds one address; give it, not {ip}");
    }
    let end = End::open(ip, args)?;
    let r = serve(args, &end, cfg);
    if args.link.counters {
        println!("qp counters: {:?}", end.qp.counters());
        println!("device counters: {:?}", end.dev.counters());
    }
    r
}

fn serve(args: &RpingArgs, end: &End, cfg: CmConfig) -> Result<bool> {
    let listener = CmListener::bind(&end.dev, args.port, cfg)?;
    let req = listener.get_request(Duration::from_secs(7 * 24 * 3600))?;
    if args.debug {
        eprintln!(
            "connection request from {} (QP 0x{:06x})",
            req.peer,
            req.qpn()
        );
    }
    let mut conn = listener.accept(&req, &end.qp, &end.attr, &[])?;
    let mut c = Some(&mut conn);
    // The client's next start buffer, when it came before the last go-ahead's completion.
    let mut early = None;
    loop {
        // The client's start buffer — or its disconnect.
        let info = match early.take() {
            Some(info) => info,
            None => loop {
                match end.next(&mut c)? {
                    None => return Ok(true),
                    Some(wc) if wc.opcode == WcOpcode::Recv => break end.take_info(&wc)?,
                    Some(_) => {}
                }
            },
        };
        let remote = |info: &[u8; 16]| {
            let addr = u64::from_be_bytes(info[..8].try_into().expect("8 bytes"));
            let rkey = u32::from_be_bytes(info[8..12].try_into().expect("4 bytes"));
            let len = u32::from_be_bytes(info[12..].try_into().expect("4 bytes"));
            (Remote { addr, rkey }, len.min(args.size))
        };
        let (src, len) = remote(&info);
        end.post(SendOp::Read(src), &end.a, len)?;
        wait_send(end, &mut c, &mut early)?;
        if args.verbose {
            println!("server ping data: {}", text(&end.a, args.size)?);
        }
        // Go ahead: the client sends where to write.
        end.send_info(&end.a, args.size)?;
        let info = end.exchange()?;
        let (dst, _) = remote(&info);
        let data = text(&end.a, args.size)?;
        let n = (data.len() as u32 + 1).min(args.size);
        end.post(SendOp::Write(dst), &end.a, n)?;
        wait_send(end, &mut c, &mut early)?;
        end.send_info(&end.a, args.size)?;
        // The client disconnects once this go-ahead reached it after its last ping: if the
        // ACK of it was lost, the disconnect comes before its completion, and the ping
        // succeeded all the same (rping's server, too, ends at the disconnect, not at a
        // completion).
        if !wait_send_or_disconnect(end, &mut c, &mut early)? {
            return Ok(true);
        }
    }
}

/// Waits for the completion of the one send-side work request outstanding; a message from
/// the client that overtakes it (its next start buffer) is kept in `early`.
fn wait_send(
    end: &End,
    c: &mut Option<&mut CmConnection>,
    early: &mut Option<[u8; INFO_LEN as usize]>,
) -> Result<()> {
    if wait_send_or_disconnect(end, c, early)? {
        Ok(())
    } else {
        bail!("the client disconnected mid-ping")
    }
}

/// [`wait_send`], but the client's disconnect ends the wait too: `false` then.
fn wait_send_or_disconnect(
    end: &End,
    c: &mut Option<&mut CmConnection>,
    early: &mut Option<[u8; INFO_LEN as usize]>,
) -> Result<bool> {
    loop {
        match end.next(c)? {
            Some(wc) if wc.opcode != WcOpcode::Recv => return Ok(true),
            Some(wc) if early.is_none() => *early = Some(end.take_info(&wc)?),
            Some(wc) => bail!(
                "a message from the client out of turn ({} bytes)",
                wc.byte_len
            ),
            None => return Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_is_rpings() {
        let d = ping_data(3, 65, 32);
        assert_eq!(&d[..14], b"rdma-ping-3: A");
        assert_eq!(d[14], b'B');
        assert_eq!(d.len(), 32);
        assert_eq!(d[31], 0);
        // The letters wrap from 'z' to 'A'.
        let d = ping_data(0, 122, 20);
        assert_eq!(&d[13..16], b"zAB");
    }
}
