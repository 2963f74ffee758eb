//! Seed 001's cluster on a virtual clock: interface nodes (I nodes) fetching
//! their streams' stripe fragments from storage nodes (S nodes) over an
//! interconnect, each S node's disk serving its queue earliest deadline
//! first, and every delay of every fragment split into the paper's
//! components (§5): network time without blocking (N_C), network blocking
//! (N_Q), S node queueing (S_Q), seek (D_S), rotation (D_R) and transfer
//! (D_T).
//!
//! The interconnect is modelled at the nodes' ports, where this traffic
//! meets: every node has one port out and one in, a message holds both ends
//! for its overhead plus its bytes at the link rate, and a message whose
//! receiver is busy waits at the head of its sender's queue, holding the
//! sender's port (wormhole routing's blocking, seed 001 §5: "the blocking time
//! due to link contention"); optionally the nodes also sit on a 2D mesh whose
//! links a message holds along its XY route (`NetworkParams::mesh_width`).
//! Requests from I to S nodes are small control messages with a fixed
//! latency. What the nodes decide (striping, routing,
//! popularity, the buffer condition) is `rondo_model::cluster`'s.
//!
//! One run is single-threaded and deterministic for its seed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use rondo_model::cluster::{
    EdgeHistory, MeasuredAdmission, PopularityLog, Retrieval, Route, Router, StreamParams, Striping,
};
#[cfg(test)]
use rondo_model::disk::seek::mean_seek_random_pairs_ns;
use rondo_model::disk::seek::{SeekCurve, SeekSpec};
use rondo_model::units::{NS_PER_MS, NS_PER_S, TitleId};

use crate::workload::PoissonArrivals;

/// A node's disk: seek curve, rotational wait and media rate.
#[derive(Clone, Debug)]
pub struct DiskParams {
    pub seek: SeekCurve,
    /// Every seek time multiplied by this (1 for the drive as modelled; a
    /// sensitivity knob for investigations).
    pub seek_scale: f64,
    pub cylinders: u32,
    /// Rotational wait, drawn uniformly from `rotation_min_ns ..= rotation_max_ns`.
    pub rotation_min_ns: u64,
    pub rotation_max_ns: u64,
    pub transfer_bytes_per_s: u64,
}

/// HP C2247A, DiskSim 4.0 `valid/hp_c2247a` (a drive of the Paragon's
/// years): HPL seek [300, 3.81, 0.33, 7.75, 0.0059] ms over 2051 cylinders.
const HP_C2247A_CYLINDERS: u32 = 2051;

impl DiskParams {
    /// Seed 001 Table 2 and §5 where they speak, assumptions elsewhere
    /// (docs/assumptions.md, "Seed 001's cluster"):
    /// - transfer 10 MB/s (§5: "a disk data transfer rate of 10 Mbytes/sec");
    /// - minimum seek 1 ms (Table 2); beyond it the HP C2247A's seek curve
    ///   (the paper gives only the minimum);
    /// - rotational wait: Table 2 gives an average of 8.03 ms and a rotation
    ///   of 10.1 ms, which no uniform wait over one rotation matches (its
    ///   mean is 5.05 ms); the wait is drawn uniformly from
    ///   [2·8.03 − 10.1, 10.1] ms, which keeps the paper's mean and never
    ///   exceeds its rotation.
    pub fn paragon() -> DiskParams {
        // HPL: V2 + V3·√d below V1 = 300 cylinders, V4 + V5·d from there.
        // The drive's own V2 = 3.81, V3 = 0.33 ms put one cylinder at
        // 4.14 ms; V2 and V3 are chosen instead so that one cylinder takes
        // Table 2's 1 ms and the branch still meets the linear one at 300
        // cylinders (9.52 ms there, as the drive's).
        let at_boundary_ms = 7.75 + 0.0059 * 300.0;
        let sqrt_ms = (at_boundary_ms - 1.0) / (300f64.sqrt() - 1.0);
        let seek = SeekCurve::new(
            &SeekSpec::Hpl {
                boundary_cylinders: 300,
                sqrt_base_ns: (1.0 - sqrt_ms) * 1e6,
                sqrt_ns: sqrt_ms * 1e6,
                linear_base_ns: 7.75e6,
                linear_ns_per_cylinder: 0.0059e6,
                single_cylinder_ns: None,
            },
            HP_C2247A_CYLINDERS,
        )
        .expect("valid HPL curve");
        DiskParams {
            seek,
            seek_scale: 1.0,
            cylinders: HP_C2247A_CYLINDERS,
            rotation_min_ns: 2 * 8_030_000 - 10_100_000,
            rotation_max_ns: 10_100_000,
            transfer_bytes_per_s: 10_000_000,
        }
    }
}

/// The interconnect.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkParams {
    /// Seed 001 §5.1: "a nearly constant bandwidth of 13.8 Mbytes/sec" over
    /// the message sizes of interest.
    pub bytes_per_s: u64,
    /// Per data message, each end: assumption, 0.1 ms, small enough that
    /// the bandwidth stays "nearly constant" from 40 KB up (3.4% of a 40 KB
    /// message's time).
    pub message_overhead_ns: u64,
    /// δ_rq, a fetch request's trip from I to S node: assumption, 0.1 ms
    /// (one small message's overhead).
    pub request_latency_ns: u64,
    /// `None`: contention only at the nodes' ports. `Some(w)`: the nodes
    /// also sit row-major on a 2D mesh `w` wide (interface nodes first), a
    /// message holding every link of its XY route while it moves (wormhole
    /// routing), so messages on crossing paths block each other.
    pub mesh_width: Option<u32>,
}

impl NetworkParams {
    pub fn paragon() -> NetworkParams {
        NetworkParams {
            bytes_per_s: 13_800_000,
            message_overhead_ns: NS_PER_MS / 10,
            request_latency_ns: NS_PER_MS / 10,
            mesh_width: None,
        }
    }
}

/// Which streams a run carries.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Population {
    /// §5: `per_interface` streams on every I node, each of a different
    /// title (RDSS's worst case), all playing from the first round on.
    PerInterface { per_interface: u32 },
    /// §6.4: `total` requests arriving uniformly over `ramp_ns`, a share
    /// `popular_share` of them for one title and the rest each for another,
    /// routed by the object manager.
    Requests {
        total: u32,
        popular_share: f64,
        ramp_ns: u64,
    },
    /// A steady state: requests arriving as a Poisson process at
    /// `concurrent / play_ns` per ns for `run_ns`, each playing `play_ns`,
    /// so that about `concurrent` play at once once the first have
    /// finished, of every age; each is for the popular title with
    /// probability `popular_share`, else for a title of its own.
    Steady {
        concurrent: u32,
        popular_share: f64,
        play_ns: u64,
        run_ns: u64,
    },
}

/// How the object manager admits a request (`Population::Requests` and
/// `Population::Steady`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    /// Only the buffer condition (4), when the I nodes' buffers are bounded.
    Buffer,
    /// Seed 001 §7: condition (4) and, for a stream fetched from S nodes,
    /// `max w_ij < δ_S − δ_ov` over its title's S nodes, w_ij the mean of
    /// the I node's last `history_fetches` retrievals from S node j, or, with
    /// no history, a probe: S node j's mean time for its last
    /// `history_fetches` retrievals (queueing included) plus the request's
    /// and a P_S message's time without blocking.
    Measured { history_fetches: usize },
}

/// One run's configuration.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub interface_count: u32,
    pub storage_count: u32,
    pub stream: StreamParams,
    pub disk: DiskParams,
    pub network: NetworkParams,
    pub retrieval: Retrieval,
    pub population: Population,
    /// Every stream plays until `play_end_ns`, the experiment's end, or for
    /// `play_min_ns` if it arrived later than that allows (§5: "the playback
    /// time for each stream varied between 4 and 5 minutes, depending on
    /// the time of arrival of the request for that stream").
    pub play_min_ns: u64,
    pub play_end_ns: u64,
    /// Δt and Th_pop·Δt of the popularity log.
    pub popularity_window_ns: u64,
    pub popularity_threshold_requests: u32,
    /// B_I_tot of every I node, for condition (4); `None`: unbounded.
    pub interface_buffer_bytes: Option<u64>,
    pub admission: Admission,
    /// LMSS: the popular title's first bytes kept in the dedicated I node's
    /// memory.
    pub lmss_memory_bytes: u64,
    /// Issue a round's S fetches spread over the first half of the round
    /// (fragment f at f·δ_S/(2S)) instead of all at its start: an
    /// investigation of how their arrivals' bunching at the I node blocks.
    pub stagger_fetches: bool,
    /// Disks of each I node holding a local copy, the copy's rounds
    /// round-robin over them (§3.2: "a node can have a disk-array").
    pub interface_local_disks: u32,
    /// The local copy's writes are due this many rounds after their data
    /// arrived (§6.2: writes "non-blocking ... in the background").
    pub write_slack_rounds: u32,
    pub seed: u64,
}

impl ClusterConfig {
    /// The paper's cluster with its defaults; assumptions documented in
    /// docs/assumptions.md.
    pub fn paragon(
        interface_count: u32,
        storage_count: u32,
        stream: StreamParams,
        population: Population,
        seed: u64,
    ) -> ClusterConfig {
        ClusterConfig {
            interface_count,
            storage_count,
            stream,
            disk: DiskParams::paragon(),
            network: NetworkParams::paragon(),
            retrieval: Retrieval::Rdss,
            population,
            play_min_ns: 240 * NS_PER_S,
            play_end_ns: 300 * NS_PER_S,
            popularity_window_ns: 60 * NS_PER_S,
            popularity_threshold_requests: 3,
            interface_buffer_bytes: None,
            admission: Admission::Buffer,
            lmss_memory_bytes: 0,
            stagger_fetches: false,
            interface_local_disks: 1,
            write_slack_rounds: 4,
            seed,
        }
    }
}

/// One fragment's delay, split as the paper splits it (ns).
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Components<T> {
    /// N_C: the request's trip and the data message's time without blocking.
    pub network: T,
    /// D_T.
    pub transfer: T,
    /// D_S.
    pub seek: T,
    /// D_R.
    pub rotation: T,
    /// N_Q: waiting for the ports.
    pub blocking: T,
    /// S_Q: waiting in the disk's queue.
    pub queueing: T,
    /// R_tot: issue to arrival.
    pub total: T,
}

impl<T: Copy> Components<T> {
    /// In the paper's stacking order, bottom to top, with its symbols.
    pub fn labelled(&self) -> [(&'static str, T); 6] {
        [
            ("N_C", self.network),
            ("D_T", self.transfer),
            ("D_S", self.seek),
            ("D_R", self.rotation),
            ("N_Q", self.blocking),
            ("S_Q", self.queueing),
        ]
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterOutcome {
    /// Fragments (and local reads) that arrived.
    pub fragments: u64,
    /// Rounds a stream took from the dedicated node's memory (LMSS).
    pub memory_rounds: u64,
    /// Mean of each component over all arrivals (ms).
    pub mean_ms: Components<f64>,
    /// Maximum of each component over all arrivals (ms), each on its own.
    pub max_ms: Components<f64>,
    /// Arrivals after their deadline (the end of the buffer playing when
    /// they were fetched).
    pub misses: u64,
    pub admitted: u32,
    pub refused: u32,
    /// Streams served from the dedicated node's local copy.
    pub local_streams: u32,
    /// Mean and maximum over the S nodes of their disks' busy share.
    pub storage_busy_mean: f64,
    pub storage_busy_max: f64,
    /// The busiest I node's incoming port's busy share.
    pub interface_port_busy_max: f64,
    /// Mean time from a stream's request to its first round's data (ms).
    pub startup_mean_ms: f64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Path {
    Remote,
    RemoteAndCopy,
    Local,
}

struct Stream {
    title_index: u64,
    interface: u32,
    path: Path,
    start_ns: u64,
    end_ns: u64,
    round0_left: u32,
    startup_ns: Option<u64>,
}

#[derive(Copy, Clone)]
struct Fetch {
    stream: u32,
    round: u64,
    disk: u32,
    bytes: u64,
    write: bool,
    issue_ns: u64,
    deadline_ns: u64,
    at_disk_ns: u64,
    start_ns: u64,
    seek_ns: u64,
    rotation_ns: u64,
    transfer_ns: u64,
    done_ns: u64,
    send_ns: u64,
}

#[derive(Default)]
struct Disk {
    head_cylinder: u32,
    current: Option<u32>,
    queue: BinaryHeap<Reverse<(u64, u64, u32)>>,
    busy_ns: u64,
}

#[derive(Default)]
struct StoragePort {
    outbox: VecDeque<u32>,
    sending: bool,
    waiting: bool,
}

#[derive(Default)]
struct InterfacePort {
    receiving: bool,
    busy_ns: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Request { index: u32 },
    Round { stream: u32, round: u64 },
    AtDisk { fetch: u32 },
    DiskDone { disk: u32 },
    Arrived { fetch: u32 },
}

struct Sim<'a> {
    c: &'a ClusterConfig,
    rng: ChaCha8Rng,
    now_ns: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    streams: Vec<Stream>,
    fetches: Vec<Fetch>,
    free_fetches: Vec<u32>,
    disks: Vec<Disk>,
    storage_ports: Vec<StoragePort>,
    interface_ports: Vec<InterfacePort>,
    /// Senders whose head message is blocked, in the order they blocked.
    pending: VecDeque<u32>,
    /// Mesh links in use (4 per mesh position: +x, −x, +y, −y).
    links_busy: Vec<bool>,
    copy_arrived: BTreeMap<(u32, u64), u32>,
    // The object manager.
    /// (arrival, for the popular title, end of play).
    requests: Vec<(u64, bool, u64)>,
    log: PopularityLog,
    router: Router,
    load: Vec<u32>,
    next_title: u64,
    refused: u32,
    /// Under measured admission, w_ij's history per (I node, S node), and
    /// each S node's own retrieval times under (u32::MAX, j).
    history: Option<EdgeHistory>,
    round_ns: u64,
    memory_rounds: u64,
    // Measures.
    fragments: u64,
    memory_served: u64,
    sum: Components<f64>,
    max: Components<u64>,
    misses: u64,
}

impl Sim<'_> {
    fn schedule(&mut self, at_ns: u64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((at_ns, self.seq, e)));
    }

    fn new_fetch(&mut self, f: Fetch) -> u32 {
        if let Some(id) = self.free_fetches.pop() {
            self.fetches[id as usize] = f;
            id
        } else {
            self.fetches.push(f);
            (self.fetches.len() - 1) as u32
        }
    }

    /// The object manager takes request `index`: logs it, routes it (the
    /// buffer condition and, if chosen, measured admission on the candidate
    /// I node), and starts the stream there.
    fn request(&mut self, index: u32) {
        let (start_ns, popular_request, end_ns) = self.requests[index as usize];
        let title = if popular_request {
            0
        } else {
            self.next_title += 1;
            self.next_title - 1
        };
        let popular = self.log.record(TitleId(title), start_ns);
        let c = self.c;
        let per_stream = c.stream.stream_buffer_bytes();
        let striping = Striping {
            storage_count: c.storage_count,
            stripe_factor: c.stream.stripe_factor,
        };
        let (load, history) = (&self.load, &self.history);
        let probe_network_ns = c.network.request_latency_ns + self.message_ns(c.stream.fetch_bytes);
        let fits = |i: u32, local: bool| {
            let in_use = u64::from(load[i as usize]) * per_stream;
            let buffer_ok = c
                .interface_buffer_bytes
                .is_none_or(|total| in_use + per_stream < total);
            match history {
                None => buffer_ok,
                Some(history) => {
                    let weights: Vec<(u32, u64)> = if local {
                        Vec::new()
                    } else {
                        (0..c.stream.stripe_factor)
                            .map(|f| {
                                let j = striping.storage_node(title, f);
                                let w = history.weight_ns(i, j).unwrap_or_else(|| {
                                    history.weight_ns(u32::MAX, j).unwrap_or(0) + probe_network_ns
                                });
                                (j, w)
                            })
                            .collect()
                    };
                    // δ_ov: the I node's own handling of a round's
                    // messages, one overhead per fragment of every stream
                    // it would serve (the network's per-message overhead).
                    let overhead_ns = c.network.message_overhead_ns
                        * u64::from(c.stream.stripe_factor)
                        * (u64::from(load[i as usize]) + 1);
                    MeasuredAdmission {
                        round_duration_ns: self.round_ns,
                        overhead_ns,
                        buffer_total_bytes: c.interface_buffer_bytes.unwrap_or(u64::MAX),
                    }
                    .admits(&weights, in_use, per_stream)
                    .is_ok()
                }
            }
        };
        let route = self.router.route(
            TitleId(title),
            popular,
            start_ns,
            c.interface_count,
            fits,
            |i| load[i as usize],
        );
        let (interface, path) = match route {
            Route::Remote { interface } => (interface, Path::Remote),
            Route::RemoteAndCopy { interface } => (interface, Path::RemoteAndCopy),
            Route::Local { interface } => (interface, Path::Local),
            Route::Refused => {
                self.refused += 1;
                return;
            }
        };
        self.load[interface as usize] += 1;
        self.streams.push(Stream {
            title_index: title,
            interface,
            path,
            start_ns,
            end_ns,
            round0_left: c.stream.stripe_factor,
            startup_ns: None,
        });
        let stream = (self.streams.len() - 1) as u32;
        self.round(stream, 0);
    }

    fn round(&mut self, stream: u32, round: u64) {
        let s = &self.streams[stream as usize];
        let issue_ns = self.now_ns;
        let deadline_ns = issue_ns + self.round_ns;
        let (path, interface, title_index) = (s.path, s.interface, s.title_index);
        let template = Fetch {
            stream,
            round,
            disk: 0,
            bytes: 0,
            write: false,
            issue_ns,
            deadline_ns,
            at_disk_ns: 0,
            start_ns: 0,
            seek_ns: 0,
            rotation_ns: 0,
            transfer_ns: 0,
            done_ns: 0,
            send_ns: 0,
        };
        match path {
            Path::Remote | Path::RemoteAndCopy => {
                let striping = Striping {
                    storage_count: self.c.storage_count,
                    stripe_factor: self.c.stream.stripe_factor,
                };
                let spread_ns = if self.c.stagger_fetches {
                    self.round_ns / (2 * u64::from(self.c.stream.stripe_factor))
                } else {
                    0
                };
                for f in 0..self.c.stream.stripe_factor {
                    let issued_ns = issue_ns + u64::from(f) * spread_ns;
                    let id = self.new_fetch(Fetch {
                        disk: striping.storage_node(title_index, f),
                        bytes: self.c.stream.fetch_bytes,
                        issue_ns: issued_ns,
                        ..template
                    });
                    self.schedule(
                        issued_ns + self.c.network.request_latency_ns,
                        Event::AtDisk { fetch: id },
                    );
                }
            }
            Path::Local if round < self.memory_rounds => {
                self.memory_served += 1;
                self.round0_arrived(stream, self.c.stream.stripe_factor);
            }
            Path::Local => {
                let id = self.new_fetch(Fetch {
                    disk: self.local_disk(interface, round),
                    bytes: self.c.stream.stream_buffer_bytes(),
                    ..template
                });
                self.at_disk(id);
            }
        }
        let next_ns = issue_ns + self.round_ns;
        if next_ns >= self.streams[stream as usize].end_ns {
            // Its last round: the I node's buffer is free from the next.
            let load = &mut self.load[interface as usize];
            *load = load.saturating_sub(1);
        } else {
            self.schedule(
                next_ns,
                Event::Round {
                    stream,
                    round: round + 1,
                },
            );
        }
    }

    /// The I node's local disk holding round `round` of its copy.
    fn local_disk(&self, interface: u32, round: u64) -> u32 {
        let k = self.c.interface_local_disks.max(1);
        self.c.storage_count + interface * k + (round % u64::from(k)) as u32
    }

    fn at_disk(&mut self, fetch: u32) {
        let f = &mut self.fetches[fetch as usize];
        f.at_disk_ns = self.now_ns;
        let disk = f.disk;
        let key = (f.deadline_ns, self.seq);
        self.seq += 1;
        self.disks[disk as usize]
            .queue
            .push(Reverse((key.0, key.1, fetch)));
        if self.disks[disk as usize].current.is_none() {
            self.start_next(disk);
        }
    }

    fn start_next(&mut self, disk: u32) {
        let Some(Reverse((_, _, fetch))) = self.disks[disk as usize].queue.pop() else {
            return;
        };
        let target = self.rng.random_range(0..self.c.disk.cylinders);
        let d = &mut self.disks[disk as usize];
        let seek_ns = (self.c.disk.seek.seek_ns(d.head_cylinder.abs_diff(target))
            * self.c.disk.seek_scale)
            .round() as u64;
        d.head_cylinder = target;
        let rotation_ns = self
            .rng
            .random_range(self.c.disk.rotation_min_ns..=self.c.disk.rotation_max_ns);
        let f = &mut self.fetches[fetch as usize];
        let transfer_ns = (u128::from(f.bytes) * u128::from(NS_PER_S)
            / u128::from(self.c.disk.transfer_bytes_per_s)) as u64;
        f.start_ns = self.now_ns;
        f.seek_ns = seek_ns;
        f.rotation_ns = rotation_ns;
        f.transfer_ns = transfer_ns;
        let service_ns = seek_ns + rotation_ns + transfer_ns;
        let d = &mut self.disks[disk as usize];
        d.current = Some(fetch);
        d.busy_ns += service_ns;
        self.schedule(self.now_ns + service_ns, Event::DiskDone { disk });
    }

    fn disk_done(&mut self, disk: u32) {
        let fetch = self.disks[disk as usize]
            .current
            .take()
            .expect("a disk finishes what it started");
        self.fetches[fetch as usize].done_ns = self.now_ns;
        let f = self.fetches[fetch as usize];
        if f.write {
            self.free_fetches.push(fetch);
        } else if disk < self.c.storage_count {
            self.storage_ports[disk as usize].outbox.push_back(fetch);
            self.try_send(disk);
        } else {
            self.arrived(fetch);
        }
        self.start_next(disk);
    }

    fn message_ns(&self, bytes: u64) -> u64 {
        self.c.network.message_overhead_ns
            + (u128::from(bytes) * u128::from(NS_PER_S) / u128::from(self.c.network.bytes_per_s))
                as u64
    }

    /// The directed mesh links from storage node `storage` to interface
    /// node `interface` under XY routing (empty when only the nodes' ports
    /// are modelled). Nodes sit row-major on the mesh, interface nodes
    /// first.
    fn path(&self, storage: u32, interface: u32) -> Vec<usize> {
        let Some(width) = self.c.network.mesh_width else {
            return Vec::new();
        };
        let width = width.max(1);
        let at = |node: u32| ((node % width) as i64, (node / width) as i64);
        let (mut x, mut y) = at(self.c.interface_count + storage);
        let (tx, ty) = at(interface);
        let mut links = Vec::new();
        let mut step = |x: &mut i64, y: &mut i64, dir: usize, dx: i64, dy: i64| {
            links.push((*y * i64::from(width) + *x) as usize * 4 + dir);
            *x += dx;
            *y += dy;
        };
        while x != tx {
            if tx > x {
                step(&mut x, &mut y, 0, 1, 0);
            } else {
                step(&mut x, &mut y, 1, -1, 0);
            }
        }
        while y != ty {
            if ty > y {
                step(&mut x, &mut y, 2, 0, 1);
            } else {
                step(&mut x, &mut y, 3, 0, -1);
            }
        }
        links
    }

    /// Whether storage node `storage`'s head message could start now: its
    /// receiver's port and every link of its path free.
    fn can_start(&self, storage: u32) -> bool {
        let Some(&fetch) = self.storage_ports[storage as usize].outbox.front() else {
            return false;
        };
        let interface = self.streams[self.fetches[fetch as usize].stream as usize].interface;
        !self.interface_ports[interface as usize].receiving
            && self
                .path(storage, interface)
                .iter()
                .all(|&l| !self.links_busy[l])
    }

    fn try_send(&mut self, storage: u32) {
        let port = &self.storage_ports[storage as usize];
        if port.sending || port.waiting || port.outbox.is_empty() {
            return;
        }
        if self.can_start(storage) {
            self.start_transfer(storage);
        } else {
            // Blocked in place, holding its sender's port, until what it
            // needs frees (wormhole routing); senders wait in arrival order.
            self.storage_ports[storage as usize].waiting = true;
            self.pending.push_back(storage);
        }
    }

    fn start_transfer(&mut self, storage: u32) {
        let fetch = self.storage_ports[storage as usize]
            .outbox
            .pop_front()
            .expect("a sender has a message");
        self.storage_ports[storage as usize].sending = true;
        let f = &mut self.fetches[fetch as usize];
        f.send_ns = self.now_ns;
        let bytes = f.bytes;
        let interface = self.streams[f.stream as usize].interface;
        for l in self.path(storage, interface) {
            self.links_busy[l] = true;
        }
        let message_ns = self.message_ns(bytes);
        let port = &mut self.interface_ports[interface as usize];
        port.receiving = true;
        port.busy_ns += message_ns;
        self.schedule(self.now_ns + message_ns, Event::Arrived { fetch });
    }

    fn transfer_done(&mut self, fetch: u32) {
        let f = self.fetches[fetch as usize];
        let interface = self.streams[f.stream as usize].interface;
        self.storage_ports[f.disk as usize].sending = false;
        self.interface_ports[interface as usize].receiving = false;
        for l in self.path(f.disk, interface) {
            self.links_busy[l] = false;
        }
        self.arrived(fetch);
        // The blocked senders, oldest first, take what has freed.
        let mut k = 0;
        while k < self.pending.len() {
            let s = self.pending[k];
            if self.can_start(s) {
                self.pending.remove(k);
                self.storage_ports[s as usize].waiting = false;
                self.start_transfer(s);
            } else {
                k += 1;
            }
        }
        self.try_send(f.disk);
    }

    fn arrived(&mut self, fetch: u32) {
        let f = self.fetches[fetch as usize];
        self.free_fetches.push(fetch);
        let remote = f.disk < self.c.storage_count;
        let network = if remote {
            self.c.network.request_latency_ns + self.message_ns(f.bytes)
        } else {
            0
        };
        let blocking = if remote { f.send_ns - f.done_ns } else { 0 };
        let c = Components {
            network,
            transfer: f.transfer_ns,
            seek: f.seek_ns,
            rotation: f.rotation_ns,
            blocking,
            queueing: f.start_ns - f.at_disk_ns,
            total: self.now_ns - f.issue_ns,
        };
        debug_assert_eq!(
            c.total,
            c.network + c.transfer + c.seek + c.rotation + c.blocking + c.queueing
        );
        self.fragments += 1;
        let add = |s: &mut f64, m: &mut u64, v: u64| {
            *s += v as f64;
            *m = (*m).max(v);
        };
        add(&mut self.sum.network, &mut self.max.network, c.network);
        add(&mut self.sum.transfer, &mut self.max.transfer, c.transfer);
        add(&mut self.sum.seek, &mut self.max.seek, c.seek);
        add(&mut self.sum.rotation, &mut self.max.rotation, c.rotation);
        add(&mut self.sum.blocking, &mut self.max.blocking, c.blocking);
        add(&mut self.sum.queueing, &mut self.max.queueing, c.queueing);
        add(&mut self.sum.total, &mut self.max.total, c.total);
        if self.now_ns > f.deadline_ns {
            self.misses += 1;
        }
        if remote && let Some(history) = &mut self.history {
            let interface = self.streams[f.stream as usize].interface;
            history.record(interface, f.disk, c.total);
            history.record(u32::MAX, f.disk, f.done_ns - f.at_disk_ns);
        }
        if f.round == 0 {
            self.round0_arrived(
                f.stream,
                if remote {
                    1
                } else {
                    self.c.stream.stripe_factor
                },
            );
        }
        if self.streams[f.stream as usize].path == Path::RemoteAndCopy {
            let n = self.copy_arrived.entry((f.stream, f.round)).or_insert(0);
            *n += 1;
            if *n == self.c.stream.stripe_factor {
                self.copy_arrived.remove(&(f.stream, f.round));
                let interface = self.streams[f.stream as usize].interface;
                let id = self.new_fetch(Fetch {
                    disk: self.local_disk(interface, f.round),
                    bytes: self.c.stream.stream_buffer_bytes(),
                    write: true,
                    deadline_ns: self.now_ns + u64::from(self.c.write_slack_rounds) * self.round_ns,
                    ..f
                });
                self.at_disk(id);
            }
        }
    }

    fn round0_arrived(&mut self, stream: u32, fragments: u32) {
        let s = &mut self.streams[stream as usize];
        s.round0_left = s.round0_left.saturating_sub(fragments);
        if s.round0_left == 0 && s.startup_ns.is_none() {
            s.startup_ns = Some(self.now_ns - s.start_ns);
        }
    }
}

/// Runs one cluster to the end of its last stream.
pub fn run(c: &ClusterConfig) -> ClusterOutcome {
    let mut rng = ChaCha8Rng::seed_from_u64(c.seed);
    let round_ns = c.stream.round_duration_ns();
    let stripe = c.stream.stripe_factor;
    let end_of = |start_ns: u64| c.play_end_ns.max(start_ns + c.play_min_ns);
    let mut streams = Vec::new();
    let mut requests: Vec<(u64, bool, u64)> = Vec::new();
    match c.population {
        Population::PerInterface { per_interface } => {
            for k in 0..per_interface * c.interface_count {
                let start_ns = rng.random_range(0..round_ns);
                streams.push(Stream {
                    title_index: u64::from(k),
                    interface: k % c.interface_count,
                    path: Path::Remote,
                    start_ns,
                    end_ns: end_of(start_ns),
                    round0_left: stripe,
                    startup_ns: None,
                });
            }
        }
        Population::Requests {
            total,
            popular_share,
            ramp_ns,
        } => {
            let popular_count = (f64::from(total) * popular_share).round() as u32;
            requests = (0..total)
                .map(|k| {
                    let at = rng.random_range(0..ramp_ns.max(1));
                    (at, k < popular_count, end_of(at))
                })
                .collect();
            requests.sort_unstable();
        }
        Population::Steady {
            concurrent,
            popular_share,
            play_ns,
            run_ns,
        } => {
            // Seed 000's Poisson process, at a rate per ns; its own stream
            // of the run's seed.
            let rate_per_ns = f64::from(concurrent.max(1)) / play_ns.max(1) as f64;
            let mut arrivals = PoissonArrivals::new(rate_per_ns, c.seed);
            loop {
                let at = arrivals.next_arrival_rounds();
                if at >= run_ns as f64 {
                    break;
                }
                let popular = rng.random::<f64>() < popular_share;
                requests.push((at as u64, popular, at as u64 + play_ns));
            }
        }
    }
    let memory_rounds = if c.retrieval == Retrieval::Lmss {
        c.lmss_memory_bytes / c.stream.stream_buffer_bytes().max(1)
    } else {
        0
    };
    let disks = (0..c.storage_count + c.interface_count * c.interface_local_disks.max(1))
        .map(|_| Disk {
            head_cylinder: rng.random_range(0..c.disk.cylinders),
            ..Disk::default()
        })
        .collect();
    let mut sim = Sim {
        c,
        rng,
        now_ns: 0,
        seq: 0,
        events: BinaryHeap::new(),
        streams,
        fetches: Vec::new(),
        free_fetches: Vec::new(),
        disks,
        storage_ports: (0..c.storage_count)
            .map(|_| StoragePort::default())
            .collect(),
        interface_ports: (0..c.interface_count)
            .map(|_| InterfacePort::default())
            .collect(),
        pending: VecDeque::new(),
        links_busy: vec![
            false;
            c.network.mesh_width.map_or(0, |w| {
                let nodes = c.interface_count + c.storage_count;
                (nodes.div_ceil(w.max(1)) * w.max(1)) as usize * 4
            })
        ],
        copy_arrived: BTreeMap::new(),
        requests,
        log: PopularityLog::new(c.popularity_window_ns, c.popularity_threshold_requests),
        router: Router::new(
            c.retrieval,
            (2 + u64::from(c.write_slack_rounds)) * round_ns,
        ),
        load: vec![0; c.interface_count as usize],
        next_title: 1,
        refused: 0,
        history: match c.admission {
            Admission::Measured { history_fetches } => Some(EdgeHistory::new(history_fetches)),
            Admission::Buffer => None,
        },
        round_ns,
        memory_rounds,
        fragments: 0,
        memory_served: 0,
        sum: Components::default(),
        max: Components::default(),
        misses: 0,
    };
    for k in 0..sim.streams.len() {
        let at = sim.streams[k].start_ns;
        sim.schedule(
            at,
            Event::Round {
                stream: k as u32,
                round: 0,
            },
        );
    }
    for k in 0..sim.requests.len() {
        let at = sim.requests[k].0;
        sim.schedule(at, Event::Request { index: k as u32 });
    }
    while let Some(Reverse((at_ns, _, event))) = sim.events.pop() {
        sim.now_ns = at_ns;
        match event {
            Event::Request { index } => sim.request(index),
            Event::Round { stream, round } => sim.round(stream, round),
            Event::AtDisk { fetch } => sim.at_disk(fetch),
            Event::DiskDone { disk } => sim.disk_done(disk),
            Event::Arrived { fetch } => sim.transfer_done(fetch),
        }
    }
    let span_ns = sim.now_ns.max(1) as f64;
    let n = sim.fragments.max(1) as f64;
    let ms = |ns: f64| ns / NS_PER_MS as f64;
    let mean = |v: f64| ms(v / n);
    let storage_busy: Vec<f64> = sim.disks[..c.storage_count as usize]
        .iter()
        .map(|d| d.busy_ns as f64 / span_ns)
        .collect();
    let startups: Vec<u64> = sim.streams.iter().filter_map(|s| s.startup_ns).collect();
    ClusterOutcome {
        fragments: sim.fragments,
        memory_rounds: sim.memory_served,
        mean_ms: Components {
            network: mean(sim.sum.network),
            transfer: mean(sim.sum.transfer),
            seek: mean(sim.sum.seek),
            rotation: mean(sim.sum.rotation),
            blocking: mean(sim.sum.blocking),
            queueing: mean(sim.sum.queueing),
            total: mean(sim.sum.total),
        },
        max_ms: Components {
            network: ms(sim.max.network as f64),
            transfer: ms(sim.max.transfer as f64),
            seek: ms(sim.max.seek as f64),
            rotation: ms(sim.max.rotation as f64),
            blocking: ms(sim.max.blocking as f64),
            queueing: ms(sim.max.queueing as f64),
            total: ms(sim.max.total as f64),
        },
        misses: sim.misses,
        admitted: sim.streams.len() as u32,
        refused: sim.refused,
        local_streams: sim.streams.iter().filter(|s| s.path == Path::Local).count() as u32,
        storage_busy_mean: storage_busy.iter().sum::<f64>() / storage_busy.len().max(1) as f64,
        storage_busy_max: storage_busy.iter().copied().fold(0.0, f64::max),
        interface_port_busy_max: sim
            .interface_ports
            .iter()
            .map(|p| p.busy_ns as f64 / span_ns)
            .fold(0.0, f64::max),
        startup_mean_ms: if startups.is_empty() {
            0.0
        } else {
            ms(startups.iter().sum::<u64>() as f64 / startups.len() as f64)
        },
    }
}

/// The largest number of requests, a multiple of `step` up to `max`, for
/// which a run admits every request and no fragment misses its deadline
/// (§6.4's "maximum number of streams that can be supported"), by
/// bisection; `with_total` builds the run for a total. Also the outcome of
/// that total's run (`None` when not even one step is supported).
pub fn max_supported(
    max: u32,
    step: u32,
    with_total: impl Fn(u32) -> ClusterConfig,
) -> (u32, Option<ClusterOutcome>) {
    let supported = |total: u32| {
        let o = run(&with_total(total));
        (o.refused == 0 && o.misses == 0).then_some(o)
    };
    let step = step.max(1);
    let (mut lo, mut hi) = (0u32, max / step); // in steps; lo supported, hi unknown
    if let Some(o) = supported(hi * step) {
        return (hi * step, Some(o));
    }
    let mut best = None;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match supported(mid * step) {
            Some(o) => {
                lo = mid;
                best = Some(o);
            }
            None => hi = mid,
        }
    }
    (lo * step, best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(per_interface: u32, fetch_kib: u64, seed: u64) -> ClusterOutcome {
        let mut c = ClusterConfig::paragon(
            6,
            35,
            StreamParams::paragon(fetch_kib * 1024, 4),
            Population::PerInterface { per_interface },
            seed,
        );
        c.play_min_ns = 50 * NS_PER_S;
        c.play_end_ns = 60 * NS_PER_S;
        run(&c)
    }

    #[test]
    fn the_paragon_disk_matches_table_2() {
        let d = DiskParams::paragon();
        assert!((d.seek.seek_ns(1) - 1e6).abs() < 1.0);
        let mean_rotation = (d.rotation_min_ns + d.rotation_max_ns) / 2;
        assert_eq!(mean_rotation, 8_030_000);
        assert!(d.rotation_max_ns <= 10_100_000);
        let mean_seek = mean_seek_random_pairs_ns(&d.seek, d.cylinders);
        assert!((8e6..14e6).contains(&mean_seek), "{mean_seek}");
    }

    #[test]
    fn components_add_up_and_fixed_ones_are_fixed() {
        let o = delays(10, 80, 1);
        let m = o.mean_ms;
        let sum = m.network + m.transfer + m.seek + m.rotation + m.blocking + m.queueing;
        assert!((sum - m.total).abs() < 1e-6 * m.total.max(1.0), "{m:?}");
        // D_T = 80 KiB at 10 MB/s; N_C = δ_rq + overhead + 80 KiB at 13.8 MB/s.
        assert!((m.transfer - 8.192).abs() < 1e-3, "{}", m.transfer);
        assert!(
            (m.network - (0.2 + 81.92 / 13.8)).abs() < 1e-3,
            "{}",
            m.network
        );
        assert_eq!(o.max_ms.transfer, m.transfer);
        // Every stream starts within its first round and plays to 60 s, in
        // rounds of 4·80 KiB / 187.5 kB/s ≈ 1.75 s: 34 or 35 rounds.
        assert!(
            (60 * 4 * 34..=60 * 4 * 35).contains(&o.fragments),
            "{}",
            o.fragments
        );
        assert_eq!((o.admitted, o.refused), (60, 0));
        assert!(o.mean_ms.rotation > 7.5 && o.mean_ms.rotation < 8.6);
    }

    #[test]
    fn load_raises_queueing_and_blocking_and_runs_repeat() {
        let light = delays(5, 40, 3);
        let heavy = delays(50, 40, 3);
        assert_eq!(heavy, delays(50, 40, 3));
        assert!(heavy.mean_ms.queueing > 2.0 * light.mean_ms.queueing.max(0.1));
        assert!(heavy.mean_ms.blocking > light.mean_ms.blocking);
        assert!(heavy.storage_busy_mean > 5.0 * light.storage_busy_mean);
        // Large fragments block longer on the network than small ones at the
        // same load (§5.1).
        let big = delays(50, 160, 3);
        assert!(big.mean_ms.blocking > heavy.mean_ms.blocking);
        assert!(big.mean_ms.queueing < heavy.mean_ms.queueing);
    }

    fn requests(retrieval: Retrieval, total: u32, share: f64) -> ClusterConfig {
        let mut c = ClusterConfig::paragon(
            6,
            24,
            StreamParams::paragon(64 * 1024, 4),
            Population::Requests {
                total,
                popular_share: share,
                ramp_ns: 60 * NS_PER_S,
            },
            5,
        );
        c.retrieval = retrieval;
        c.lmss_memory_bytes = 16 * 1024 * 1024;
        c.play_min_ns = 60 * NS_PER_S;
        c.play_end_ns = 120 * NS_PER_S;
        c
    }

    #[test]
    fn a_popular_title_is_copied_and_served_locally() {
        let o = run(&requests(Retrieval::Ldss, 120, 0.3));
        assert!(o.local_streams > 20, "{o:?}");
        let m = run(&requests(Retrieval::Lmss, 120, 0.3));
        assert_eq!(m.local_streams, o.local_streams);
        assert!(m.memory_rounds > 0);
        let r = run(&requests(Retrieval::Rdss, 120, 0.3));
        assert_eq!(r.local_streams, 0);
        assert_eq!(r.memory_rounds, 0);
        // RDSS piles the popular title's streams onto its four S nodes.
        assert!(r.storage_busy_max > o.storage_busy_max, "{r:?} {o:?}");
    }

    #[test]
    fn buffer_condition_refuses_and_bisection_finds_the_edge() {
        let mut c = requests(Retrieval::Rdss, 60, 0.0);
        // Room for 9 streams of 256 KiB per I node: (4) is strict.
        c.interface_buffer_bytes = Some(10 * 256 * 1024);
        let o = run(&c);
        assert_eq!((o.admitted, o.refused), (54, 6));
        let (max, _) = max_supported(120, 6, |total| {
            let mut c = requests(Retrieval::Rdss, total, 0.0);
            c.interface_buffer_bytes = Some(10 * 256 * 1024);
            c
        });
        assert_eq!(max, 54);
    }
}
