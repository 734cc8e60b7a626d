//! A switch's packet queues, in the two buffer architectures of [`SwitchModel`], behind one
//! interface ([`Queues`]): packets join the queue of (output, class) and leave it in the order
//! the architecture serves them.
//!
//! * **Input-queued** ([`Voqs`]): one virtual output queue per (input, output, class); an
//!   output serves the inputs with packets for it round-robin, one packet each (the IRN
//!   paper's switch, §4.1). The queues are lists threaded through the packets' [`Meta::next`]
//!   and the round-robin list through the VOQs, so a hop touches no allocation.
//! * **Shared-buffer** ([`OutputQueues`]): one FIFO per (output, class), served in arrival
//!   order (a shared-memory switch; admission and the dynamic threshold are the switch's,
//!   `switch.rs`).

use std::collections::VecDeque;

use super::classes::MAX_CLASSES;
use super::packet::{Meta, NIL};
use crate::config::SwitchModel;

/// No input: the end of an output's round-robin list.
const NO_INPUT: u16 = u16::MAX;

/// A virtual output queue: a list of packets threaded through [`Meta::next`], and the link of
/// the output's round-robin list of inputs with packets for it.
#[derive(Debug, Clone, Copy)]
struct Voq {
    head: u32,
    tail: u32,
    /// The next input in the output's round-robin list ([`NO_INPUT`]: the last).
    next_input: u16,
}

/// An output's (and class's) round-robin list of inputs with packets for it, threaded through
/// the VOQs' `next_input`.
#[derive(Debug, Clone, Copy)]
struct InputRing {
    head: u16,
    tail: u16,
}

impl InputRing {
    const EMPTY: InputRing = InputRing {
        head: NO_INPUT,
        tail: NO_INPUT,
    };
}

impl Voq {
    const EMPTY: Voq = Voq {
        head: NIL,
        tail: NIL,
        next_input: NO_INPUT,
    };

    fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Appends `pkt`; returns whether the queue was empty. The tail's `next` is never read
    /// (the tail ends the list), so the new packet's metadata is not touched.
    fn push(&mut self, meta: &mut [Meta], pkt: u32) -> bool {
        let was_empty = self.tail == NIL;
        if was_empty {
            self.head = pkt;
        } else {
            meta[self.tail as usize].next = pkt;
        }
        self.tail = pkt;
        was_empty
    }

    fn pop(&mut self, meta: &[Meta]) -> Option<u32> {
        if self.head == NIL {
            return None;
        }
        let pkt = self.head;
        if pkt == self.tail {
            self.head = NIL;
            self.tail = NIL;
        } else {
            self.head = meta[pkt as usize].next;
        }
        Some(pkt)
    }

    /// The packets, head first.
    fn iter<'a>(&self, meta: &'a [Meta]) -> impl Iterator<Item = u32> + 'a {
        let (mut at, tail) = (self.head, self.tail);
        std::iter::from_fn(move || {
            let p = at;
            (p != NIL).then(|| {
                at = if p == tail {
                    NIL
                } else {
                    meta[p as usize].next
                };
                p
            })
        })
    }
}

/// Input-queued: virtual output queues with round-robin service of the inputs. Class-major:
/// the queues of one class are contiguous, so a switch whose traffic uses two of its classes
/// touches no more memory than a two-class switch would.
#[derive(Debug)]
pub(super) struct Voqs {
    nports: usize,
    /// Per (class, input, output).
    voq: Vec<Voq>,
    /// Per (class, output): inputs with packets for it, in round-robin order.
    active: Vec<InputRing>,
}

impl Voqs {
    fn new(nports: usize, nclasses: usize) -> Voqs {
        Voqs {
            nports,
            voq: vec![Voq::EMPTY; nclasses * nports * nports],
            active: vec![InputRing::EMPTY; nclasses * nports],
        }
    }

    /// The virtual output queue of (input `inp`, `out`, class `c`).
    #[inline]
    fn at(&self, out: usize, c: usize, inp: u16) -> usize {
        (c * self.nports + usize::from(inp)) * self.nports + out
    }

    /// The round-robin list of (`out`, `c`).
    #[inline]
    fn ring(&self, out: usize, c: usize) -> usize {
        c * self.nports + out
    }

    /// Puts input `inp` last in the round-robin list of (`out`, `c`).
    fn active_push(&mut self, out: usize, c: usize, inp: u16) {
        let at = self.at(out, c, inp);
        self.voq[at].next_input = NO_INPUT;
        let r = self.ring(out, c);
        let ring = &mut self.active[r];
        let tail = ring.tail;
        ring.tail = inp;
        if tail == NO_INPUT {
            ring.head = inp;
        } else {
            let t = self.at(out, c, tail);
            self.voq[t].next_input = inp;
        }
    }

    /// Takes the first input of the round-robin list of (`out`, `c`).
    fn active_pop(&mut self, out: usize, c: usize) -> Option<u16> {
        let r = self.ring(out, c);
        let i = self.active[r].head;
        if i == NO_INPUT {
            return None;
        }
        let next = self.voq[self.at(out, c, i)].next_input;
        let ring = &mut self.active[r];
        ring.head = next;
        if next == NO_INPUT {
            ring.tail = NO_INPUT;
        }
        Some(i)
    }

    fn push(&mut self, meta: &mut [Meta], out: usize, c: usize, inp: u16, pkt: u32) {
        let at = self.at(out, c, inp);
        if self.voq[at].push(meta, pkt) {
            self.active_push(out, c, inp);
        }
    }

    /// The head of the next input's queue in round-robin order; that input goes to the back
    /// of the list if it has more.
    fn pop(&mut self, meta: &[Meta], out: usize, c: usize) -> Option<(u32, u16)> {
        let i = self.active_pop(out, c)?;
        let at = self.at(out, c, i);
        let pkt = self.voq[at].pop(meta);
        if !self.voq[at].is_empty() {
            self.active_push(out, c, i);
        }
        pkt.map(|p| (p, i))
    }
}

/// Shared-buffer: one FIFO of (packet, input) per (class, output).
#[derive(Debug)]
pub(super) struct OutputQueues {
    nports: usize,
    fifo: Vec<VecDeque<(u32, u16)>>,
}

/// A switch's queues: the two architectures behind one interface.
#[derive(Debug)]
pub(super) enum Queues {
    /// Virtual output queues, inputs served round-robin.
    InputQueued(Voqs),
    /// Output FIFOs.
    SharedBuffer(OutputQueues),
}

impl Queues {
    /// Empty queues for a switch of `nports` ports and `nclasses` classes (at most
    /// [`MAX_CLASSES`]).
    pub(super) fn new(model: SwitchModel, nports: usize, nclasses: usize) -> Queues {
        debug_assert!(nclasses <= MAX_CLASSES);
        match model {
            SwitchModel::InputQueued => Queues::InputQueued(Voqs::new(nports, nclasses)),
            SwitchModel::SharedBuffer => Queues::SharedBuffer(OutputQueues {
                nports,
                fifo: (0..nclasses * nports).map(|_| VecDeque::new()).collect(),
            }),
        }
    }

    /// `pkt`, arrived through `inp`, joins the queue of (`out`, class `c`).
    #[inline]
    pub(super) fn push(&mut self, meta: &mut [Meta], out: usize, c: usize, inp: u16, pkt: u32) {
        match self {
            Queues::InputQueued(v) => v.push(meta, out, c, inp, pkt),
            Queues::SharedBuffer(q) => q.fifo[c * q.nports + out].push_back((pkt, inp)),
        }
    }

    /// The next packet (and its input) output `out` sends of class `c`.
    #[inline]
    pub(super) fn pop(&mut self, meta: &[Meta], out: usize, c: usize) -> Option<(u32, u16)> {
        match self {
            Queues::InputQueued(v) => v.pop(meta, out, c),
            Queues::SharedBuffer(q) => q.fifo[c * q.nports + out].pop_front(),
        }
    }

    /// Each output, in ascending order, with a packet of class `c` queued for it that came
    /// in through `inp` (what a paused ingress waits on: the deadlock check's edges). The
    /// input-queued model answers from its VOQs' heads without walking a packet.
    pub(super) fn outputs_holding(&self, inp: u16, c: usize, mut f: impl FnMut(usize)) {
        match self {
            Queues::InputQueued(v) => {
                let n = v.nports;
                let base = (c * n + usize::from(inp)) * n;
                for (out, q) in v.voq[base..base + n].iter().enumerate() {
                    if !q.is_empty() {
                        f(out);
                    }
                }
            }
            Queues::SharedBuffer(q) => {
                let n = q.nports;
                for (out, fifo) in q.fifo[c * n..(c + 1) * n].iter().enumerate() {
                    if fifo.iter().any(|&(_, i)| i == inp) {
                        f(out);
                    }
                }
            }
        }
    }

    /// Every queued packet as (packet, input, output, class), for audits.
    pub(super) fn for_each(&self, meta: &[Meta], mut f: impl FnMut(u32, u16, usize, usize)) {
        match self {
            Queues::InputQueued(v) => {
                let n = v.nports;
                for (k, q) in v.voq.iter().enumerate() {
                    let (c, inp, out) = (k / n / n, (k / n) % n, k % n);
                    for p in q.iter(meta) {
                        f(p, inp as u16, out, c);
                    }
                }
            }
            Queues::SharedBuffer(q) => {
                for (k, fifo) in q.fifo.iter().enumerate() {
                    for &(p, inp) in fifo {
                        f(p, inp, k % q.nports, k / q.nports);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::packet::Hop;
    use irn_wire::Ecn;

    fn metas(n: usize) -> Vec<Meta> {
        let hop = Hop::new(0, 0, 100, 0, Ecn::NotEct, None);
        vec![Meta { hop, next: NIL }; n]
    }

    fn drain(q: &mut Queues, meta: &[Meta], out: usize, c: usize) -> Vec<(u32, u16)> {
        std::iter::from_fn(|| q.pop(meta, out, c)).collect()
    }

    #[test]
    fn an_input_queued_output_serves_its_inputs_round_robin() {
        let mut meta = metas(16);
        let mut q = Queues::new(SwitchModel::InputQueued, 4, 2);
        // Input 2 has three packets for output 0, input 0 one, input 3 two.
        for (pkt, inp) in [(0, 2), (1, 2), (2, 0), (3, 2), (4, 3), (5, 3)] {
            q.push(&mut meta, 0, 0, inp, pkt);
        }
        // A packet for another output and another class changes nothing here.
        q.push(&mut meta, 1, 0, 2, 6);
        q.push(&mut meta, 0, 1, 2, 7);
        assert_eq!(
            drain(&mut q, &meta, 0, 0),
            [(0, 2), (2, 0), (4, 3), (1, 2), (5, 3), (3, 2)]
        );
        assert_eq!(drain(&mut q, &meta, 1, 0), [(6, 2)]);
        assert_eq!(drain(&mut q, &meta, 0, 1), [(7, 2)]);
        assert_eq!(q.pop(&meta, 0, 0), None);
    }

    #[test]
    fn a_shared_buffer_output_serves_in_arrival_order() {
        let mut meta = metas(8);
        let mut q = Queues::new(SwitchModel::SharedBuffer, 3, 2);
        for (pkt, inp) in [(0, 2), (1, 2), (2, 0), (3, 1)] {
            q.push(&mut meta, 1, 0, inp, pkt);
        }
        assert_eq!(drain(&mut q, &meta, 1, 0), [(0, 2), (1, 2), (2, 0), (3, 1)]);
    }

    #[test]
    fn outputs_holding_names_the_outputs_an_input_has_packets_queued_for() {
        for model in [SwitchModel::InputQueued, SwitchModel::SharedBuffer] {
            let mut meta = metas(8);
            let mut q = Queues::new(model, 3, 2);
            // (output, class, input, packet)
            for (out, c, inp, pkt) in [(1, 0, 0, 0), (0, 1, 2, 1), (0, 0, 1, 2), (2, 0, 1, 4)] {
                q.push(&mut meta, out, c, inp, pkt);
            }
            let held = |q: &Queues, inp: u16, c: usize| {
                let mut v = Vec::new();
                q.outputs_holding(inp, c, |o| v.push(o));
                v
            };
            assert_eq!(held(&q, 1, 0), [0, 2], "{model:?}");
            assert_eq!(held(&q, 0, 0), [1], "{model:?}");
            assert_eq!(held(&q, 0, 1), Vec::<usize>::new(), "{model:?}");
            assert_eq!(held(&q, 2, 1), [0], "{model:?}");
            // The same answer as walking every packet.
            for inp in 0..3u16 {
                for c in 0..2 {
                    let mut walked = std::collections::BTreeSet::new();
                    q.for_each(&meta, |_, i, o, cl| {
                        if i == inp && cl == c {
                            walked.insert(o);
                        }
                    });
                    let walked: Vec<usize> = walked.into_iter().collect();
                    assert_eq!(held(&q, inp, c), walked, "{model:?} {inp} {c}");
                }
            }
        }
    }

    #[test]
    fn for_each_sees_every_queued_packet_once() {
        for model in [SwitchModel::InputQueued, SwitchModel::SharedBuffer] {
            let mut meta = metas(8);
            let mut q = Queues::new(model, 3, 2);
            q.push(&mut meta, 0, 0, 1, 0);
            q.push(&mut meta, 2, 1, 0, 1);
            q.push(&mut meta, 2, 1, 0, 2);
            let mut seen = Vec::new();
            q.for_each(&meta, |p, inp, out, c| seen.push((p, inp, out, c)));
            seen.sort_unstable();
            assert_eq!(
                seen,
                [(0, 1, 0, 0), (1, 0, 2, 1), (2, 0, 2, 1)],
                "{model:?}"
            );
        }
    }
}
