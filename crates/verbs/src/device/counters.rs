//! The device's own counters, next to each queue pair's.

/// Device-wide counters (the driver's, next to each queue pair's own
/// [`Counters`](irn_transport::Counters)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Bytes sent (UDP payloads).
    pub tx_bytes: u64,
    /// Datagrams received.
    pub rx_packets: u64,
    /// Bytes received (UDP payloads).
    pub rx_bytes: u64,
    /// Received datagrams that do not parse as an InfiniBand packet (dropped).
    pub rx_malformed: u64,
    /// Received packets whose ICRC is wrong (dropped, as rxe drops them). Counted only where
    /// received ICRCs can be verified: on the raw path, and for IPv6.
    pub rx_icrc_errors: u64,
    /// Received packets for a queue pair this device does not have (dropped, as rxe does).
    pub rx_unknown_qp: u64,
    /// Received packets for a queue pair another member of this device's group owns, handed
    /// to that member ([`Device::open_group`](super::Device::open_group)): the kernel steers
    /// each packet to its owner, and these are what it could not — the later packets of a
    /// coalesced datagram that mixed members' queue pairs (an older peer's GSO message, or
    /// what a NIC's GRO merged from queue pairs sharing a flow).
    pub rx_forwarded: u64,
    /// Such packets dropped because their owner's inbox was full (its program has not let
    /// it receive for a whole burst).
    pub rx_forward_dropped: u64,
    /// Received packets whose source is not the queue pair's peer: another address (dropped, as
    /// rxe does), or another UDP port — in the IRN modes, whose peer is always an irn device
    /// sending from the port it was told, any other; in the RoCE modes, any other than the one
    /// the peer's first packet came from.
    pub rx_wrong_source: u64,
    /// Sends the kernel refused (buffer full, unreachable): the packet is lost.
    pub tx_errors: u64,
    /// Packets dropped by the send impairment.
    pub tx_impaired_drops: u64,
    /// Packets dropped by the receive impairment.
    pub rx_impaired_drops: u64,
    /// Packets duplicated, reordered or delayed by either impairment.
    pub impaired_other: u64,
    /// Packets written to the capture.
    pub captured: u64,
    /// UDP GSO messages sent: each carried two or more packets in one system call, cut into
    /// datagrams by the kernel (their packets are in `tx_packets`). Only towards peers that
    /// take them ([`Qp::set_peer_gso`](super::Qp::set_peer_gso)).
    pub tx_gso_messages: u64,
    /// PFC and PAUSE frames received on [`DeviceConfig::pause_iface`](super::DeviceConfig::pause_iface).
    pub pause_frames_received: u64,
    /// Transmit turns a pause held back.
    pub pause_held_turns: u64,
    /// The NIC-side PFC watchdog fired: pauses are no longer honoured (0 or 1).
    pub pause_watchdog_fired: u64,
    /// The rate the device's frames leave at, bits per second (0: unpaced;
    /// [`DeviceConfig::line_rate_bps`](super::DeviceConfig::line_rate_bps)).
    pub line_rate_bps: u64,
    /// Transmit turns held back because the line was booked ahead (`device/line.rs`).
    pub line_held_turns: u64,
    /// Packets built with their payload left where it lies in registered memory, the kernel
    /// gathering it from there (no copy behind the headers; a payload whose first piece is
    /// under 512 bytes, or in more than four pieces, is copied).
    pub tx_lent: u64,
    /// System calls that sent packets (`sendmmsg`, each one datagram or GSO message or
    /// more): `tx_packets` over this is the packets a call moved, which the doorbell for
    /// posts and UDP GSO raise ([`Qp::post_send`](super::Qp::post_send)).
    pub tx_calls: u64,
    /// Transmit batches a spinning busy poller's rounds held (what received packets provoked,
    /// ACKs above all, with any posts of its own still waiting) for the poller's next visit,
    /// to leave with what the program posts in answer
    /// ([`DeviceConfig::busy_poll`](super::DeviceConfig::busy_poll)).
    pub tx_held: u64,
    /// Of those, batches the poller left behind: it stopped spinning before its next visit,
    /// and the engine sent them when the device's watcher next looked (`POLLER_WATCH`) or
    /// at its own look. A batch still held when
    /// the engine takes the device back, a millisecond after the last poll, leaves with the
    /// engine's first round and is not counted here.
    pub tx_held_left: u64,
    /// Rounds of the device's work the engine thread ran (a wake-up's: what the socket
    /// held, timers, turns).
    pub engine_rounds: u64,
    /// Rounds of the device's work run by threads waiting on a CQ
    /// ([`DeviceConfig::wait_drives`](super::DeviceConfig::wait_drives)).
    pub wait_rounds: u64,
    /// Times such a thread, asleep in `poll(2)`, was woken by a completion another thread
    /// made on the CQ it waits on (`device/drive.rs`).
    pub wait_woken_by_completion: u64,
    /// Times such a thread was woken by another thread's post, which left it packets to send
    /// or a queue pair's turn to give.
    pub wait_woken_by_post: u64,
    /// Coalesced datagrams received (a GSO peer's messages, or what GRO merged), each split
    /// back into the packets counted in `rx_packets`.
    pub rx_coalesced: u64,
    /// Datagrams longer than one packet that the raw receive path could not cut into their
    /// packets (counted in `rx_malformed` too): no length gave a first packet with a valid
    /// ICRC and, where the others start, BTHs for this device's queue pairs — or the search's
    /// budget ran out (`Core::receive_coalesced`). Only a peer on this host sends coalesced
    /// datagrams whole (loopback, veths); a corrupted or forged one, or one from a peer that
    /// numbers its segments' identifications otherwise, lands here.
    pub rx_oversized: u64,
    /// Connections (INIT → RTR) that send from the device's port instead of a port of their
    /// own: theirs could not be bound, or the device had [`MAX_SOURCE_PORTS`](super::MAX_SOURCE_PORTS) open already.
    pub tx_port_fallbacks: u64,
    /// Transmit turns in which a queue pair had new packets ready that waited for the
    /// device's in-flight budget ([`DeviceConfig::in_flight_budget`](super::DeviceConfig::in_flight_budget)).
    pub tx_budget_holds: u64,
    /// The most bytes the device's queue pairs had in flight together.
    pub peak_in_flight_bytes: u64,
    /// Frames sent with an 802.1Q tag ([`DeviceConfig::vlan`](super::DeviceConfig::vlan)).
    pub tx_tagged: u64,
    /// Packets a tagging device sent untagged, through the UDP socket: their peer had no
    /// complete entry in the neighbour table yet (`device/tagged.rs`).
    pub tx_tag_unresolved: u64,
}
