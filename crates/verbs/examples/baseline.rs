//! Kernel baselines for the irn-verbs benchmark (`scripts/bench-verbs`), measured on the same
//! loopback in the same run: one TCP stream's bandwidth, and a UDP ping-pong's round trip.
//!
//! `cargo run --release -p irn-verbs --example baseline -- tcp MB` prints MB/s (2^20);
//! `... -- udp ITERS SIZE` prints the median round trip and its 99th percentile in µs (a
//! blocking ping-pong: each end sleeps in `recvfrom`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    match args.get(1).map(String::as_str) {
        Some("tcp") => {
            let mb = arg(2, 2048);
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
            let buf = vec![7u8; 1 << 20];
            let t = Instant::now();
            for _ in 0..mb {
                s.write_all(&buf)?;
            }
            drop(s);
            let n = rx
                .join()
                .map_err(|_| std::io::Error::other("receiver panicked"))??;
            println!("{:.2}", n as f64 / t.elapsed().as_secs_f64() / 1048576.0);
        }
        Some("udp") => {
            let (iters, size) = (arg(2, 10000), arg(3, 64) as usize);
            let a = UdpSocket::bind("127.0.0.1:0")?;
            let b = UdpSocket::bind("127.0.0.1:0")?;
            let (aa, ba) = (a.local_addr()?, b.local_addr()?);
            let echo = std::thread::spawn(move || -> std::io::Result<()> {
                let mut buf = vec![0u8; 65536];
                for _ in 0..iters {
                    let (n, from) = b.recv_from(&mut buf)?;
                    b.send_to(&buf[..n], from)?;
                }
                Ok(())
            });
            let msg = vec![1u8; size];
            let mut buf = vec![0u8; 65536];
            let mut rtt = Vec::with_capacity(iters as usize);
            for _ in 0..iters {
                let t = Instant::now();
                a.send_to(&msg, ba)?;
                a.recv_from(&mut buf)?;
                rtt.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let _ = aa;
            echo.join()
                .map_err(|_| std::io::Error::other("echo panicked"))??;
            rtt.sort_by(f64::total_cmp);
            let p99 = rtt[(rtt.len() * 99 / 100).min(rtt.len() - 1)];
            println!("{:.2} {:.2}", rtt[rtt.len() / 2], p99);
        }
        _ => eprintln!("usage: baseline tcp MB | baseline udp ITERS SIZE"),
    }
    Ok(())
}
