//! The UDP source ports a device's queue pairs send from: Linux's choice per connection
//! (`rdma_get_udp_sport`, [`net::roce_source_port`]) — RoCEv2's entropy, so that ECMP
//! spreads a device's queue pairs over paths (RoCEv2 annex A17.3.3) — each with a send-only
//! socket bound to it, opened as queue pairs connect and closed when the last one using the
//! port is gone; the device's own port where a port cannot be had.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::net;

/// The most source-port sockets a device has open at once (file descriptors): a queue pair
/// whose port would need one more sends from the device's port, as does one whose port
/// cannot be bound (`DeviceCounters::tx_port_fallbacks` counts both).
pub const MAX_SOURCE_PORTS: usize = 256;

/// A send-only socket on one queue-pair source port (shared with the transmit batches sealed
/// for it, which may leave after it is closed here).
pub(crate) struct SourceSocket {
    pub(super) sock: UdpSocket,
    /// It currently sends IPv4 datagrams without a checksum (`SO_NO_CHECK`): read and switched
    /// only by the thread sending a batch, one at a time (`tx.rs`).
    pub(super) no_check: AtomicBool,
}

/// The source-port sockets of a device bound to `local`.
pub(super) struct SourcePorts {
    local: SocketAddr,
    /// By port, at most [`MAX_SOURCE_PORTS`].
    socks: BTreeMap<u16, Arc<SourceSocket>>,
    /// The send buffer each of them gets.
    socket_buffer: usize,
}

/// The port a queue pair got ([`SourcePorts::open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Got {
    /// Its own (or the device's, where the two coincide).
    Own(u16),
    /// The device's port instead: no socket could be had for its own.
    Fallback(u16),
}

impl Got {
    /// The port.
    pub(super) fn port(self) -> u16 {
        match self {
            Got::Own(p) | Got::Fallback(p) => p,
        }
    }
}

impl SourcePorts {
    /// None open yet, for a device bound to `local` whose sockets get `socket_buffer` bytes
    /// of send buffer.
    pub(super) fn new(local: SocketAddr, socket_buffer: usize) -> SourcePorts {
        SourcePorts {
            local,
            socks: BTreeMap::new(),
            socket_buffer,
        }
    }

    /// The UDP source port queue pair `qpn` sends from once connected to `dest_qpn`,
    /// [`net::roce_source_port`]'s, with its socket opened now if need be — or the device's
    /// port if that cannot be (too many open, or the port is taken).
    pub(super) fn open(&mut self, qpn: u32, dest_qpn: u32) -> Got {
        let port = net::roce_source_port(qpn, dest_qpn);
        if port == self.local.port() || self.socks.contains_key(&port) {
            return Got::Own(port);
        }
        if self.socks.len() >= MAX_SOURCE_PORTS {
            return Got::Fallback(self.local.port());
        }
        match net::open_source_socket(self.local.ip(), port, self.socket_buffer) {
            Ok(sock) => {
                let no_check = AtomicBool::new(self.local.is_ipv4());
                self.socks
                    .insert(port, Arc::new(SourceSocket { sock, no_check }));
                Got::Own(port)
            }
            Err(_) => Got::Fallback(self.local.port()),
        }
    }

    /// Closes the socket of `port` unless it is the device's own or `in_use` (some queue
    /// pair still sends from it).
    pub(super) fn release(&mut self, port: u16, in_use: bool) {
        if port != self.local.port() && !in_use {
            self.socks.remove(&port);
        }
    }

    /// The socket of `port`, to hand to a transmit batch; `None` for the device's own port,
    /// or once the last queue pair using `port` is gone (`Err`).
    pub(super) fn shared(&self, port: u16) -> Result<Option<Arc<SourceSocket>>, ()> {
        if port == self.local.port() {
            Ok(None)
        } else {
            self.socks.get(&port).cloned().map(Some).ok_or(())
        }
    }

    /// The socket that sends packets built with source port `port` (their ICRC covers it):
    /// the device's own (`main`) for its port, that port's otherwise — `None` once the last
    /// queue pair using the port is gone.
    pub(super) fn sender<'a>(&'a self, main: &'a UdpSocket, port: u16) -> Option<&'a UdpSocket> {
        if port == self.local.port() {
            Some(main)
        } else {
            self.socks.get(&port).map(|s| &s.sock)
        }
    }

    /// The ports with a socket open, in order.
    pub(super) fn open_ports(&self) -> Vec<u16> {
        self.socks.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_opened_once_shared_and_closed_when_its_last_user_goes() {
        let main = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let local = main.local_addr().expect("addr");
        let mut ports = SourcePorts::new(local, 1 << 16);
        let got = ports.open(17, 17);
        let Got::Own(p) = got else {
            // The port is taken on this host: the device's own port, as designed.
            assert_eq!(got, Got::Fallback(local.port()));
            return;
        };
        assert_eq!(p, net::roce_source_port(17, 17));
        assert_eq!(ports.open(17, 17), Got::Own(p));
        assert_eq!(ports.open_ports(), [p]);
        assert!(ports.sender(&main, p).is_some());
        assert!(matches!(ports.shared(p), Ok(Some(_))));
        // The device's own port needs no socket of its own, and is never closed.
        assert!(matches!(ports.shared(local.port()), Ok(None)));
        ports.release(local.port(), false);
        assert!(std::ptr::eq(
            ports.sender(&main, local.port()).expect("main"),
            &main
        ));
        // Still used: kept; its last user gone: closed, and a batch built for it has no socket.
        ports.release(p, true);
        assert_eq!(ports.open_ports(), [p]);
        ports.release(p, false);
        assert!(ports.open_ports().is_empty());
        assert!(ports.sender(&main, p).is_none());
        assert!(ports.shared(p).is_err());
    }
}
