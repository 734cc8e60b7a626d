//! pcap capture of everything a device sends and receives, as raw IP packets (link type 101,
//! `LINKTYPE_RAW`), readable by `irn decode`, tshark and Wireshark.
//!
//! Sent packets are written exactly as the kernel puts them on the wire from an unconnected
//! socket with `IP_PMTUDISC_DO` (IPv4 ID 0, DF, TTL 64), so their ICRC checks. Received packets
//! come from a UDP socket, which hides the sender's IP header: the capture rebuilds it with the
//! same conventions, so a packet from a sender that uses another IP ID (Linux rxe increments
//! it) shows an ICRC mismatch in the capture although nothing was wrong on the wire. That is the
//! unprivileged mode's limit, stated in `docs/VERBS.md`.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, SystemTime};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

/// An open capture file.
pub(crate) struct Capture {
    /// `None` only while dropping.
    w: Option<PcapWriter<BufWriter<File>>>,
    pub(crate) written: u64,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("written", &self.written)
            .finish()
    }
}

impl Capture {
    /// Creates (or truncates) the capture file; an error names it.
    pub(crate) fn create(path: &Path) -> std::io::Result<Capture> {
        let named = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("capture file {}: {e}", path.display()))
        };
        let file = BufWriter::new(File::create(path).map_err(named)?);
        let header = PcapHeader {
            datalink: DataLink::RAW,
            snaplen: 65535,
            ..PcapHeader::default()
        };
        let w = PcapWriter::with_header(file, header).map_err(std::io::Error::other)?;
        Ok(Capture {
            w: Some(w),
            written: 0,
        })
    }

    /// Appends one IP packet; a failure to write is reported once by the caller's counter, never
    /// a panic.
    pub(crate) fn write(&mut self, ip_packet: &[u8]) -> bool {
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let len = ip_packet.len() as u32;
        let ok = self
            .w
            .as_mut()
            .is_some_and(|w| w.write_packet(&PcapPacket::new(ts, len, ip_packet)).is_ok());
        self.written += u64::from(ok);
        ok
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        use std::io::Write;
        if let Some(w) = self.w.take() {
            let _ = w.into_writer().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapReader;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("irn-capture-{}-{name}", std::process::id()))
    }

    /// What is written is read back as raw IP packets, byte for byte and in order, once the
    /// capture is dropped (its buffer flushed), and the count says how many.
    #[test]
    fn packets_read_back_as_raw_ip_in_order() {
        let path = temp("two");
        let packets: [&[u8]; 2] = [&[0x45, 0, 0, 20, 1, 2, 3], &[0x45; 60]];
        {
            let mut c = Capture::create(&path).expect("created");
            for p in packets {
                assert!(c.write(p));
            }
            assert_eq!(c.written, 2);
        }
        // Read whole, and the file removed, before anything is asserted.
        let bytes = std::fs::read(&path);
        let _ = std::fs::remove_file(&path);
        let bytes = bytes.expect("written");
        let mut r = PcapReader::new(&bytes[..]).expect("a pcap file");
        assert_eq!(r.header().datalink, DataLink::RAW);
        let mut read = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.expect("a whole record");
            assert_eq!(p.orig_len as usize, p.data.len());
            read.push(p.data.into_owned());
        }
        assert_eq!(read, packets.map(<[u8]>::to_vec));
    }

    /// A file that cannot be created is an error naming it.
    #[test]
    fn a_file_that_cannot_be_created_is_named() {
        let path = temp("missing-dir").join("capture.pcap");
        let e = Capture::create(&path).expect_err("no such directory");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
}
