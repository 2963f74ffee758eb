//! Seed 001's cluster decisions (Jadav, Srinilta, Choudhary and Berra, "An
//! Evaluation of Design Tradeoffs in a High Performance Media-on-Demand
//! Server"): the object manager routes each request to an interface node
//! (I node), which fetches the stream's stripe fragments from the storage
//! nodes (S nodes) in service rounds.
//!
//! This module owns what those nodes decide, with no I/O and no clock, so a
//! simulated cluster (`rondo_sim::cluster`) and real nodes run the same rules:
//! the paper's stream parameters and the service round they give (Table 1,
//! §5.2), where a title's fragments live (round-robin striping over `S`
//! storage nodes), the object manager's popularity log over a window Δt with
//! threshold Th_pop (§6.2), the routing of a request under RDSS, LDSS and
//! LMSS (§6), and the measured admission of §7 (the edge weights w_ij as the
//! mean of the last m retrieval times, `max w_ij < δ_S − δ_ov` and the buffer
//! condition (4)).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::units::{NS_PER_S, TitleId};

/// Seed 001 Table 2: "Required playback rate (R_pl) 1.5 Mbits/sec" (MPEG-1).
pub const PARAGON_PLAYBACK_BYTES_PER_S: u64 = 1_500_000 / 8;

/// Seed 001 Table 1's stream parameters, those of the fetches (the I node's
/// packets to its clients, P_I and δ_I, are not modelled: they leave by the
/// external network).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamParams {
    /// R_pl.
    pub playback_bytes_per_s: u64,
    /// P_S: one fetch from one storage node.
    pub fetch_bytes: u64,
    /// S: the storage nodes a title is striped over; a service round
    /// fetches one fragment from each.
    pub stripe_factor: u32,
}

impl StreamParams {
    /// The paper's stream (Table 2) with the fetch size and stripe factor
    /// its experiments vary.
    pub fn paragon(fetch_bytes: u64, stripe_factor: u32) -> StreamParams {
        StreamParams {
            playback_bytes_per_s: PARAGON_PLAYBACK_BYTES_PER_S,
            fetch_bytes,
            stripe_factor,
        }
    }

    /// B_I: a service round's data, S fragments of P_S (§5.2: "stream
    /// buffer size of 640 kilobytes and stripe factors of 2, 4, 6 and 8 ...
    /// P_S values of 320, 160, 106 and 80 kilobytes").
    pub fn stream_buffer_bytes(&self) -> u64 {
        self.fetch_bytes * u64::from(self.stripe_factor)
    }

    /// δ_S: how long B_I lasts at the playback rate, the service round.
    pub fn round_duration_ns(&self) -> u64 {
        (u128::from(self.stream_buffer_bytes()) * u128::from(NS_PER_S)
            / u128::from(self.playback_bytes_per_s.max(1))) as u64
    }
}

/// Where titles live: each title striped round-robin over `stripe_factor`
/// consecutive storage nodes, titles laid one after another so that the next
/// title starts on the node after the previous one's last (§4.1: "striped
/// across the server nodes in a round-robin fashion").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Striping {
    pub storage_count: u32,
    pub stripe_factor: u32,
}

impl Striping {
    /// The storage node holding fragment `fragment` (0 .. S−1 within a
    /// round) of title number `title_index`.
    pub fn storage_node(&self, title_index: u64, fragment: u32) -> u32 {
        let n = u64::from(self.storage_count.max(1));
        let first = title_index * u64::from(self.stripe_factor) % n;
        ((first + u64::from(fragment % self.stripe_factor.max(1))) % n) as u32
    }
}

/// Seed 001 §6's retrieval algorithms.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retrieval {
    /// Remote Disk Stream Scheduling: every stream fetches its fragments
    /// from the storage nodes.
    Rdss,
    /// Local Disk Stream Scheduling: a popular title is copied, as its next
    /// viewer fetches it, to the local disk of an I node dedicated to it,
    /// which serves later viewers from there.
    Ldss,
    /// Local Memory Stream Scheduling: LDSS, plus the title's first packets
    /// kept in the dedicated I node's memory.
    Lmss,
}

impl Retrieval {
    /// Whether popular titles get a dedicated I node with a local copy.
    pub fn uses_local_copy(self) -> bool {
        self != Retrieval::Rdss
    }
}

/// The object manager's log of requests (§6.2): a title requested at least
/// `threshold_requests` times within the last `window_ns` (Δt; the rate
/// threshold Th_pop times Δt) is popular.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PopularityLog {
    window_ns: u64,
    threshold_requests: u32,
    requests: BTreeMap<TitleId, VecDeque<u64>>,
}

impl PopularityLog {
    pub fn new(window_ns: u64, threshold_requests: u32) -> PopularityLog {
        PopularityLog {
            window_ns,
            threshold_requests: threshold_requests.max(1),
            requests: BTreeMap::new(),
        }
    }

    /// Logs a request for `title` at `now_ns` (non-decreasing) and answers
    /// whether the title is popular with it counted.
    pub fn record(&mut self, title: TitleId, now_ns: u64) -> bool {
        let log = self.requests.entry(title).or_default();
        log.push_back(now_ns);
        Self::expire(log, now_ns, self.window_ns);
        log.len() >= self.threshold_requests as usize
    }

    /// Whether `title` is popular at `now_ns` with the requests logged.
    pub fn is_popular(&self, title: TitleId, now_ns: u64) -> bool {
        self.requests.get(&title).is_some_and(|log| {
            log.iter().filter(|&&t| t + self.window_ns > now_ns).count()
                >= self.threshold_requests as usize
        })
    }

    fn expire(log: &mut VecDeque<u64>, now_ns: u64, window_ns: u64) {
        while log.front().is_some_and(|&t| t + window_ns <= now_ns) {
            log.pop_front();
        }
    }
}

/// Where the object manager sends a request (§3.2, §6).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Fetch from the storage nodes (RDSS) through this I node.
    Remote { interface: u32 },
    /// Fetch from the storage nodes through the title's new dedicated I
    /// node, writing what arrives to its local disk (the first viewer after
    /// the title became popular, LDSS and LMSS).
    RemoteAndCopy { interface: u32 },
    /// Read from the dedicated I node's local copy (and, LMSS, its memory).
    Local { interface: u32 },
    /// No I node can take the stream (its buffer condition (4) fails).
    Refused,
}

/// The object manager's routing state: which I node is dedicated to the
/// popular title, and from when its local copy can be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router {
    pub retrieval: Retrieval,
    /// (title, I node, the instant the copy's first viewer started).
    dedicated: Option<(TitleId, u32, u64)>,
    /// How long after the copying viewer's start a later viewer may read
    /// the copy: the copy is written behind the copying stream, so a viewer
    /// starting this much later never reads past what is written.
    copy_lead_ns: u64,
}

impl Router {
    pub fn new(retrieval: Retrieval, copy_lead_ns: u64) -> Router {
        Router {
            retrieval,
            dedicated: None,
            copy_lead_ns,
        }
    }

    /// The dedicated I node, if a title has one.
    pub fn dedicated_interface(&self) -> Option<u32> {
        self.dedicated.map(|(_, i, _)| i)
    }

    /// Routes a request for `title` at `now_ns`. `popular` is the
    /// popularity log's answer; `fits(i, local)` whether I node `i` can take
    /// one more stream, served from its local copy or not (its buffer, and
    /// under measured admission its edges); `load(i)` its streams. A plain request goes to
    /// the least-loaded I node that fits (ties to the lowest number), never
    /// to a dedicated one (§6.4: "we allocate a dedicated I node for the
    /// popular object").
    pub fn route(
        &mut self,
        title: TitleId,
        popular: bool,
        now_ns: u64,
        interface_count: u32,
        fits: impl Fn(u32, bool) -> bool,
        load: impl Fn(u32) -> u32,
    ) -> Route {
        let least_loaded = |skip: Option<u32>| {
            (0..interface_count)
                .filter(|&i| Some(i) != skip && fits(i, false))
                .min_by_key(|&i| (load(i), i))
        };
        if self.retrieval.uses_local_copy() && popular {
            match self.dedicated {
                Some((t, i, copy_start)) if t == title => {
                    let local = now_ns >= copy_start + self.copy_lead_ns;
                    return match (fits(i, local), local) {
                        (false, _) => Route::Refused,
                        (true, true) => Route::Local { interface: i },
                        (true, false) => Route::Remote { interface: i },
                    };
                }
                Some(_) => {} // one dedicated node, for the first popular title
                None => {
                    let Some(i) = least_loaded(None) else {
                        return Route::Refused;
                    };
                    self.dedicated = Some((title, i, now_ns));
                    return Route::RemoteAndCopy { interface: i };
                }
            }
        }
        match least_loaded(self.dedicated_interface()) {
            Some(interface) => Route::Remote { interface },
            None => Route::Refused,
        }
    }
}

/// What the object manager of a real cluster does with a stream request
/// that an interface node forwards ([`LocalCopies::route`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CopyRoute {
    /// Serve it through the asking I node, from the storage nodes (RDSS).
    Relay,
    /// Serve it, and tell the asking I node it is now the title's dedicated
    /// node: it copies the title to its local disk (LDSS, LMSS).
    RelayAndCopy,
    /// Send the client to the title's dedicated I node (its number in the
    /// order the manager first heard of the copy-capable nodes).
    Redirect { interface: u32 },
}

/// The object manager's side of LDSS and LMSS on a real cluster (§6.2,
/// §6.4): the popularity log over Δt, and which I node is dedicated to each
/// popular title. Where the simulated cluster's [`Router`] places every
/// request on an I node, here the clients choose their I node; the manager
/// only dedicates a popular title to a node that can hold copies and sends
/// that title's later viewers there.
///
/// - A title becomes popular at the request that brings its count within
///   Δt to the threshold. If that request came through an I node able to
///   hold a copy, that node is dedicated to the title (it is serving the
///   title's viewers already, and its copy starts with this stream);
///   otherwise the title waits for a request through such a node.
/// - A dedicated title's requests through another I node are redirected to
///   the dedicated one; through the dedicated node itself (its copy not
///   ready yet) they are relayed as under RDSS.
/// - A node is dedicated to at most `titles_per_interface` titles (§6.4
///   dedicates one node to the one popular title), and a title stays
///   dedicated while the manager runs.
/// - A dedicated node serves other titles too (rondo's default), or, with
///   [`LocalCopies::exclusive`] (§6.4 as the paper has it: "other requests
///   go to the other I nodes"), it serves only its dedicated titles: a new
///   viewer of another title that comes through it is redirected to a node
///   not dedicated to any title, taken in turn (the manager does not see
///   the I nodes' loads, so the paper's least-loaded choice becomes
///   round-robin). With no such node known, the viewer is relayed there.
///
/// I nodes are numbered in the order the manager first hears from them
/// ([`LocalCopies::interface`]), by the URL they give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalCopies {
    retrieval: Retrieval,
    log: PopularityLog,
    titles_per_interface: u32,
    dedicated: BTreeMap<TitleId, u32>,
    exclusive: bool,
    /// I nodes' URLs, by number, and whether each can hold copies.
    interfaces: Vec<String>,
    can_copy: Vec<bool>,
    /// Turn of the next redirect away from a dedicated node (exclusive).
    next_shared: u32,
}

impl LocalCopies {
    pub fn new(
        retrieval: Retrieval,
        window_ns: u64,
        threshold_requests: u32,
        titles_per_interface: u32,
    ) -> LocalCopies {
        LocalCopies {
            retrieval,
            log: PopularityLog::new(window_ns, threshold_requests),
            titles_per_interface: titles_per_interface.max(1),
            dedicated: BTreeMap::new(),
            exclusive: false,
            interfaces: Vec::new(),
            can_copy: Vec::new(),
            next_shared: 0,
        }
    }

    /// Dedicated nodes serve only their dedicated titles (seed 001 §6.4).
    pub fn exclusive(mut self, exclusive: bool) -> LocalCopies {
        self.exclusive = exclusive;
        self
    }

    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }

    /// The number of the I node at `url`, numbering it if new; `can_copy`:
    /// it has local disks for copies (as it says now).
    pub fn interface(&mut self, url: &str, can_copy: bool) -> u32 {
        let i = match self.interfaces.iter().position(|n| n == url) {
            Some(i) => i,
            None => {
                self.interfaces.push(url.to_string());
                self.can_copy.push(can_copy);
                self.interfaces.len() - 1
            }
        };
        self.can_copy[i] = can_copy;
        i as u32
    }

    /// The URLs of the I nodes, by number.
    pub fn interfaces(&self) -> &[String] {
        &self.interfaces
    }

    /// Under [`LocalCopies::exclusive`], where a request for `title` that
    /// came through `from` goes when `from` is dedicated to other titles:
    /// the next node dedicated to none. `None` otherwise.
    fn away_from_dedicated(&mut self, title: TitleId, from: Option<u32>) -> Option<u32> {
        let from = from?;
        if !self.exclusive
            || self.dedicated.get(&title) == Some(&from)
            || !self.dedicated.values().any(|&d| d == from)
        {
            return None;
        }
        let shared: Vec<u32> = (0..self.interfaces.len() as u32)
            .filter(|i| !self.dedicated.values().any(|d| d == i))
            .collect();
        if shared.is_empty() {
            return None;
        }
        let pick = shared[self.next_shared as usize % shared.len()];
        self.next_shared = self.next_shared.wrapping_add(1);
        Some(pick)
    }

    pub fn retrieval(&self) -> Retrieval {
        self.retrieval
    }

    /// The I node dedicated to `title`, if any.
    pub fn dedicated(&self, title: TitleId) -> Option<u32> {
        self.dedicated.get(&title).copied()
    }

    /// Every dedicated title and its I node.
    pub fn dedicated_titles(&self) -> impl Iterator<Item = (TitleId, u32)> + '_ {
        self.dedicated.iter().map(|(&t, &i)| (t, i))
    }

    /// Routes a new viewer's request for `title` at `now_ns`
    /// (non-decreasing) that came through I node `from`
    /// ([`LocalCopies::interface`]; `None` for a client of the manager
    /// itself): [`LocalCopies::route_continuing`]; for a request served
    /// where it came, [`LocalCopies::log_request`], then
    /// [`LocalCopies::viewer_admitted`]. The server calls them apart: the
    /// request is logged once it is past a takeover's refusal (an
    /// interface node asks again through it, and that is one request), and
    /// a node is dedicated only by a viewer admitted through it, whose
    /// answer carries the order to copy.
    pub fn route(&mut self, title: TitleId, from: Option<u32>, now_ns: u64) -> CopyRoute {
        match self.route_continuing(title, from) {
            CopyRoute::Relay => {
                self.log_request(title, now_ns);
                if self.viewer_admitted(title, from, now_ns) {
                    CopyRoute::RelayAndCopy
                } else {
                    CopyRoute::Relay
                }
            }
            route => route,
        }
    }

    /// Logs a new viewer's request for `title` at `now_ns` (§6.2's log of
    /// requests, admitted or not).
    pub fn log_request(&mut self, title: TitleId, now_ns: u64) {
        if self.retrieval.uses_local_copy() {
            self.log.record(title, now_ns);
        }
    }

    /// A new viewer of `title` was admitted at `now_ns` through `from`:
    /// `true` when the title is popular and has no node yet, and `from`, a
    /// node able to hold copies with room in its quota, is now its
    /// dedicated node: the node copies the title.
    pub fn viewer_admitted(&mut self, title: TitleId, from: Option<u32>, now_ns: u64) -> bool {
        if !self.retrieval.uses_local_copy() {
            return false;
        }
        match from {
            Some(i)
                if self.log.is_popular(title, now_ns)
                    && !self.dedicated.contains_key(&title)
                    && self.can_copy.get(i as usize) == Some(&true)
                    && self.dedicated.values().filter(|&&d| d == i).count()
                        < self.titles_per_interface as usize =>
            {
                self.dedicated.insert(title, i);
                true
            }
            _ => false,
        }
    }

    /// Routes a continuing request for `title` (a viewer's later range or
    /// time seek, not a new viewer): not logged as popularity, but a
    /// dedicated title is still served only by its dedicated node, and
    /// (exclusive) a dedicated node serves no other title.
    pub fn route_continuing(&mut self, title: TitleId, from: Option<u32>) -> CopyRoute {
        if !self.retrieval.uses_local_copy() {
            return CopyRoute::Relay;
        }
        match self.dedicated.get(&title) {
            Some(&interface) if from != Some(interface) => CopyRoute::Redirect { interface },
            _ => match self.away_from_dedicated(title, from) {
                Some(interface) => CopyRoute::Redirect { interface },
                None => CopyRoute::Relay,
            },
        }
    }
}

/// Seed 001 §7.2's history: each edge (I node, S node) keeps the last `m`
/// times to retrieve a fragment, queueing and network included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeHistory {
    keep: usize,
    samples: BTreeMap<(u32, u32), VecDeque<u64>>,
}

impl EdgeHistory {
    pub fn new(keep: usize) -> EdgeHistory {
        EdgeHistory {
            keep: keep.max(1),
            samples: BTreeMap::new(),
        }
    }

    pub fn record(&mut self, interface: u32, storage: u32, retrieval_ns: u64) {
        let s = self.samples.entry((interface, storage)).or_default();
        if s.len() == self.keep {
            s.pop_front();
        }
        s.push_back(retrieval_ns);
    }

    /// w_ij from history: the mean of the last m retrievals, if any.
    pub fn weight_ns(&self, interface: u32, storage: u32) -> Option<u64> {
        let s = self.samples.get(&(interface, storage))?;
        if s.is_empty() {
            return None;
        }
        Some(s.iter().sum::<u64>() / s.len() as u64)
    }
}

/// Why measured admission refused a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MeasuredRefusal {
    /// Condition (4): the I node's buffer would not hold the new stream's.
    Buffer { in_use_bytes: u64, total_bytes: u64 },
    /// Condition (5): an edge's weight is not below δ_S − δ_ov.
    Retrieval {
        storage: u32,
        weight_ns: u64,
        limit_ns: u64,
    },
}

/// Condition (4) of seed 001 §7.1, strict: B_I_tot > Σ B_Ij + B_IM.
fn buffer_condition(
    total_bytes: u64,
    in_use_bytes: u64,
    new_bytes: u64,
) -> Result<(), MeasuredRefusal> {
    if in_use_bytes.saturating_add(new_bytes) >= total_bytes {
        return Err(MeasuredRefusal::Buffer {
            in_use_bytes,
            total_bytes,
        });
    }
    Ok(())
}

/// A real I node's buffer ledger (`rondo node interface
/// --buffer-total-mib`): B_I_tot, and the B_Ij reserved by the streams it
/// serves. A stream is taken only while condition (4) holds with it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InterfaceBuffer {
    total_bytes: u64,
    in_use_bytes: u64,
}

impl InterfaceBuffer {
    pub fn new(total_bytes: u64) -> InterfaceBuffer {
        InterfaceBuffer {
            total_bytes,
            in_use_bytes: 0,
        }
    }

    /// Reserves a new stream's `bytes` if condition (4) holds with them.
    pub fn reserve(&mut self, bytes: u64) -> Result<(), MeasuredRefusal> {
        buffer_condition(self.total_bytes, self.in_use_bytes, bytes)?;
        self.in_use_bytes += bytes;
        Ok(())
    }

    /// Returns a reservation's `bytes` (the stream ended).
    pub fn release(&mut self, bytes: u64) {
        debug_assert!(bytes <= self.in_use_bytes, "released more than reserved");
        self.in_use_bytes = self.in_use_bytes.saturating_sub(bytes);
    }

    pub fn in_use_bytes(&self) -> u64 {
        self.in_use_bytes
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }
}

/// Seed 001 §7's measured admission on one I node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MeasuredAdmission {
    /// δ_S.
    pub round_duration_ns: u64,
    /// δ_ov: the I node's operating-system overhead per round.
    pub overhead_ns: u64,
    /// B_I_tot.
    pub buffer_total_bytes: u64,
}

impl MeasuredAdmission {
    /// `weights` are (S node, w_ij) for every storage node of the new
    /// stream's title; `in_use_bytes` the buffers of the streams the I node
    /// serves; `new_bytes` the new stream's B_I.
    pub fn admits(
        &self,
        weights: &[(u32, u64)],
        in_use_bytes: u64,
        new_bytes: u64,
    ) -> Result<(), MeasuredRefusal> {
        buffer_condition(self.buffer_total_bytes, in_use_bytes, new_bytes)?;
        let limit_ns = self.round_duration_ns.saturating_sub(self.overhead_ns);
        if let Some(&(storage, weight_ns)) = weights.iter().max_by_key(|&&(s, w)| (w, u32::MAX - s))
            && weight_ns >= limit_ns
        {
            return Err(MeasuredRefusal::Retrieval {
                storage,
                weight_ns,
                limit_ns,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::NS_PER_MS;

    /// LDSS on a real cluster: the request that makes a title popular
    /// dedicates the copy-capable node it came through; later requests
    /// through other nodes are redirected there, through the dedicated node
    /// relayed; a node holds at most its quota of titles; RDSS never copies.
    #[test]
    fn local_copies_dedicate_the_node_that_makes_a_title_popular() {
        let s = NS_PER_S;
        let (a, b) = (TitleId(1), TitleId(2));
        let mut copies = LocalCopies::new(Retrieval::Ldss, 60 * s, 3, 1);
        assert_eq!(
            (
                copies.interface("http://x:1", true),
                copies.interface("http://y:1", true)
            ),
            (0, 1)
        );
        assert_eq!(copies.route(a, Some(0), 0), CopyRoute::Relay);
        assert_eq!(copies.route(a, None, s), CopyRoute::Relay);
        // The third within Δt, through node 1: node 1 copies.
        assert_eq!(copies.route(a, Some(1), 2 * s), CopyRoute::RelayAndCopy);
        assert_eq!(copies.dedicated(a), Some(1));
        assert_eq!(
            copies.route(a, Some(0), 3 * s),
            CopyRoute::Redirect { interface: 1 }
        );
        assert_eq!(
            copies.route(a, None, 4 * s),
            CopyRoute::Redirect { interface: 1 }
        );
        assert_eq!(copies.route(a, Some(1), 5 * s), CopyRoute::Relay);
        // A viewer's later range: not popularity, but still only node 1.
        assert_eq!(
            copies.route_continuing(a, Some(0)),
            CopyRoute::Redirect { interface: 1 }
        );
        assert_eq!(copies.route_continuing(a, Some(1)), CopyRoute::Relay);
        assert_eq!(copies.route_continuing(b, Some(0)), CopyRoute::Relay);
        // A second popular title: node 1 has its one title, node 0 takes it.
        for t in 0..3 {
            assert_eq!(copies.route(b, Some(1), (6 + t) * s), CopyRoute::Relay);
        }
        assert_eq!(copies.route(b, Some(0), 9 * s), CopyRoute::RelayAndCopy);
        assert_eq!(
            copies.dedicated_titles().collect::<Vec<_>>(),
            vec![(a, 1), (b, 0)]
        );
        // Requests spread beyond Δt never make a title popular.
        let mut slow = LocalCopies::new(Retrieval::Lmss, 60 * s, 3, 1);
        for k in 0..10 {
            assert_eq!(slow.route(a, Some(0), k * 31 * s), CopyRoute::Relay);
        }
        // Exclusive (§6.4 as the paper has it): the dedicated node sends
        // other titles' viewers to the nodes dedicated to none, in turn.
        let mut only = LocalCopies::new(Retrieval::Ldss, 60 * s, 3, 1).exclusive(true);
        let (n0, n1, n2) = (
            only.interface("http://a:1", true),
            only.interface("http://b:1", true),
            only.interface("http://c:1", false),
        );
        assert_eq!(
            (n0, n1, n2, only.interface("http://b:1", true)),
            (0, 1, 2, 1)
        );
        assert_eq!(
            only.route(b, Some(n0), 0),
            CopyRoute::Relay,
            "none dedicated yet"
        );
        only.route(a, Some(n0), 0);
        only.route(a, Some(n0), 0);
        assert_eq!(only.route(a, Some(n0), 0), CopyRoute::RelayAndCopy);
        let away: Vec<CopyRoute> = (0..3).map(|k| only.route(b, Some(n0), k * s)).collect();
        assert_eq!(
            away,
            [n1, n2, n1].map(|interface| CopyRoute::Redirect { interface }),
            "b (now popular, n0 at its quota) goes to n1 and n2 in turn"
        );
        assert_eq!(only.route(a, Some(n0), 4 * s), CopyRoute::Relay);
        assert_eq!(
            only.route_continuing(b, Some(n0)),
            CopyRoute::Redirect { interface: n2 }
        );
        // b popular through n1 (redirected requests are not counted: the
        // redirected viewer is, where it lands): n1 is b's, and n2 is the
        // one shared node.
        assert_eq!(only.route(b, Some(n1), 5 * s), CopyRoute::Relay);
        assert_eq!(only.route(b, Some(n1), 5 * s), CopyRoute::RelayAndCopy);
        assert_eq!(
            only.route(TitleId(3), Some(n1), 6 * s),
            CopyRoute::Redirect { interface: n2 }
        );
        assert_eq!(only.route(TitleId(3), Some(n2), 6 * s), CopyRoute::Relay);
        // Popular through a node without local disks: no one copies it.
        for _ in 0..3 {
            assert_eq!(only.route(TitleId(4), Some(n2), 6 * s), CopyRoute::Relay);
        }
        assert_eq!(only.dedicated(TitleId(4)), None);
        assert_eq!(
            only.route(a, Some(n2), 7 * s),
            CopyRoute::Redirect { interface: n0 }
        );
        // Shared (rondo's default): the dedicated node serves others too.
        assert_eq!(copies.route(TitleId(3), Some(1), 10 * s), CopyRoute::Relay);
        let mut rdss = LocalCopies::new(Retrieval::Rdss, 60 * s, 1, 1);
        assert_eq!(rdss.route(a, Some(0), 0), CopyRoute::Relay);
        assert_eq!(rdss.dedicated(a), None);
        assert_eq!(rdss.route_continuing(a, Some(0)), CopyRoute::Relay);
    }

    #[test]
    fn an_interface_buffer_takes_streams_while_condition_4_holds() {
        let mut buffer = InterfaceBuffer::new(100);
        assert_eq!(buffer.reserve(40), Ok(()));
        assert_eq!(buffer.reserve(40), Ok(()));
        // 80 + 20 = 100 is not below B_I_tot: (4) is strict.
        assert_eq!(
            buffer.reserve(20),
            Err(MeasuredRefusal::Buffer {
                in_use_bytes: 80,
                total_bytes: 100
            })
        );
        assert_eq!(buffer.reserve(19), Ok(()));
        assert_eq!(buffer.in_use_bytes(), 99);
        buffer.release(40);
        assert_eq!(buffer.reserve(20), Ok(()));
        assert_eq!((buffer.in_use_bytes(), buffer.total_bytes()), (79, 100));
    }

    #[test]
    fn paper_durations() {
        // §5.2: a 640 KB buffer at 1.5 Mbit/s lasts 3.5 s whatever S is.
        for s in [2u32, 4, 8] {
            let p = StreamParams::paragon(640 * 1024 / u64::from(s), s);
            assert_eq!(p.stream_buffer_bytes(), 640 * 1024);
            assert_eq!(p.round_duration_ns(), 640 * 1024 * NS_PER_S / 187_500);
        }
    }

    #[test]
    fn striping_is_round_robin_and_titles_follow_each_other() {
        let s = Striping {
            storage_count: 35,
            stripe_factor: 4,
        };
        assert_eq!(
            (0..4).map(|f| s.storage_node(0, f)).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(s.storage_node(1, 0), 4);
        assert_eq!(
            (0..4).map(|f| s.storage_node(8, f)).collect::<Vec<_>>(),
            [32, 33, 34, 0]
        );
        // Over 35 titles every node holds exactly 4 fragments per round.
        let mut per_node = [0u32; 35];
        for t in 0..35 {
            for f in 0..4 {
                per_node[s.storage_node(t, f) as usize] += 1;
            }
        }
        assert!(per_node.iter().all(|&n| n == 4), "{per_node:?}");
    }

    #[test]
    fn popularity_counts_requests_within_the_window() {
        let mut log = PopularityLog::new(10 * NS_PER_S, 3);
        let t = TitleId(7);
        assert!(!log.record(t, 0));
        assert!(!log.record(t, 4 * NS_PER_S));
        assert!(log.record(t, 9 * NS_PER_S));
        // Asked without a request: the one at 0 s leaves the window at 10 s.
        assert!(log.is_popular(t, 9 * NS_PER_S) && !log.is_popular(t, 10 * NS_PER_S));
        // The requests at 0 and 4 s have left the window by 14 s.
        assert!(!log.record(t, 14 * NS_PER_S));
        assert!(!log.record(TitleId(8), 14 * NS_PER_S));
        assert!(!log.is_popular(TitleId(9), 0));
    }

    #[test]
    fn routing_dedicates_one_node_to_the_popular_title() {
        let loads = [3u32, 1, 2];
        let mut r = Router::new(Retrieval::Ldss, 5 * NS_PER_S);
        let fits = |_i: u32, _local: bool| true;
        let load = |i: u32| loads[i as usize];
        assert_eq!(
            r.route(TitleId(1), false, 0, 3, fits, load),
            Route::Remote { interface: 1 }
        );
        // The first popular request makes the least-loaded node dedicated.
        assert_eq!(
            r.route(TitleId(9), true, NS_PER_S, 3, fits, load),
            Route::RemoteAndCopy { interface: 1 }
        );
        // Plain requests avoid it from now on.
        assert_eq!(
            r.route(TitleId(2), false, NS_PER_S, 3, fits, load),
            Route::Remote { interface: 2 }
        );
        // A viewer too soon after the copy's start fetches remotely there.
        assert_eq!(
            r.route(TitleId(9), true, 2 * NS_PER_S, 3, fits, load),
            Route::Remote { interface: 1 }
        );
        assert_eq!(
            r.route(TitleId(9), true, 6 * NS_PER_S, 3, fits, load),
            Route::Local { interface: 1 }
        );
        // A full dedicated node refuses its title.
        assert_eq!(
            r.route(TitleId(9), true, 7 * NS_PER_S, 3, |i, _| i != 1, load),
            Route::Refused
        );
        // RDSS never dedicates.
        let mut rdss = Router::new(Retrieval::Rdss, 0);
        assert_eq!(
            rdss.route(TitleId(9), true, 0, 3, fits, load),
            Route::Remote { interface: 1 }
        );
        assert_eq!(rdss.dedicated_interface(), None);
        assert_eq!(
            rdss.route(TitleId(9), true, 0, 3, |_, _| false, load),
            Route::Refused
        );
    }

    #[test]
    fn measured_admission_checks_buffer_then_the_heaviest_edge() {
        let mut h = EdgeHistory::new(2);
        h.record(0, 3, 10 * NS_PER_MS);
        h.record(0, 3, 30 * NS_PER_MS);
        h.record(0, 3, 50 * NS_PER_MS); // the first leaves: mean of the last two
        assert_eq!(h.weight_ns(0, 3), Some(40 * NS_PER_MS));
        assert_eq!(h.weight_ns(1, 3), None);
        let a = MeasuredAdmission {
            round_duration_ns: 100 * NS_PER_MS,
            overhead_ns: 20 * NS_PER_MS,
            buffer_total_bytes: 1000,
        };
        assert_eq!(
            a.admits(&[(3, 40 * NS_PER_MS), (4, 79 * NS_PER_MS)], 0, 100),
            Ok(())
        );
        assert_eq!(
            a.admits(&[(3, 40 * NS_PER_MS), (4, 80 * NS_PER_MS)], 0, 100),
            Err(MeasuredRefusal::Retrieval {
                storage: 4,
                weight_ns: 80 * NS_PER_MS,
                limit_ns: 80 * NS_PER_MS
            })
        );
        assert_eq!(
            a.admits(&[], 900, 100),
            Err(MeasuredRefusal::Buffer {
                in_use_bytes: 900,
                total_bytes: 1000
            })
        );
        assert_eq!(a.admits(&[], 899, 100), Ok(()));
    }
}
