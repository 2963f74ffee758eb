//! One `rondo load` run on a tokio multi-thread runtime: read the titles,
//! read the server's counters, open the idle clients, then start one task per
//! arriving stream at the Poisson times (rate per second, seeded) with titles
//! drawn by Zipf popularity (seeded), both from `rondo_sim::workload` so the
//! load is the simulator's workload. When the duration ends no stream starts;
//! the running ones are waited for (up to the drain timeout, after which they
//! are cut and count as broken). Then the idle clients are released, the
//! server's counters read again, `--verify`'s reference GETs made, and the
//! report built.
//!
//! With `--processes K` the clients run in K child processes (one process
//! holds at most its open-file limit of connections): every child draws the
//! same seeded arrivals and titles and runs the streams (and idle clients)
//! whose index is its own modulo K, so the load is the one a single process
//! would make; this process reads the server's counters before and after
//! and merges the children's records into one report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rondo_sim::workload::{PoissonArrivals, TitleChoice};
use std::sync::atomic::Ordering::Relaxed;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::client::{
    ClientSettings, FailoverUrls, LiveCounters, Outcome, StreamPlan, StreamRecord, TitleInfo,
    run_stream,
};
use super::idle::{IdleRecord, open_idle};
use super::report::{Collected, Report, RunSettings, VerifiedTitle, VerifySummary, summarise};
use super::server_metrics;

/// What a run does (the parsed command line).
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Base URL, without a trailing slash.
    pub url: String,
    /// Where streams are asked for, in turn (`url` alone unless several
    /// were given).
    pub entry_urls: Vec<String>,
    pub rate_per_s: f64,
    pub duration: Duration,
    pub zipf_exponent: f64,
    /// Seed 001's popularity (`TitleChoice::popular`) instead of Zipf.
    pub popular_share: Option<f64>,
    pub seed: u64,
    pub max_streams: usize,
    pub idle_clients: usize,
    pub warmup: Duration,
    pub verify_streams: usize,
    pub client: ClientSettings,
    /// How long to wait for running streams after the duration; `None`:
    /// twice the longest title plus a minute.
    pub drain_timeout: Option<Duration>,
    pub progress: bool,
    pub per_stream: bool,
    /// Resume a broken stream at another of the cluster's interface nodes
    /// (`--failover`).
    pub failover: bool,
    /// Which of the streams this process runs.
    pub shard: Shard,
}

/// The streams (and idle clients) one process runs: those whose index is
/// `index` modulo `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Every stream, in this process.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/K` (`--shard`).
    pub fn parse(text: &str) -> anyhow::Result<Shard> {
        let parsed = text
            .split_once('/')
            .and_then(|(i, k)| Some((i.parse().ok()?, k.parse().ok()?)));
        match parsed {
            Some((index, count)) if index < count => Ok(Shard { index, count }),
            _ => bail!("--shard must be I/K with I < K, like 0/2, not {text:?}"),
        }
    }

    fn owns(&self, index: usize) -> bool {
        index % self.count == self.index
    }
}

/// Seed offsets: arrivals, title choice and idle clients' titles are
/// independent streams, so adding idle clients leaves the arrivals alone.
const TITLE_SEED_OFFSET: u64 = 1;
const IDLE_SEED_OFFSET: u64 = 2;
/// How long cut streams get to finish their records after the drain timeout.
const CUT_GRACE: Duration = Duration::from_secs(2);
/// How often the progress line is redrawn.
const PROGRESS_TICK: Duration = Duration::from_millis(500);

/// Runs the load on a fresh multi-thread runtime.
pub fn run_blocking(config: LoadConfig) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(config))
}

/// An entry of `GET /api/titles`: a title on the array has an id and a
/// schedule; a title whose home is a tier names it.
#[derive(serde::Deserialize)]
struct ListedTitle {
    id: Option<u64>,
    name: String,
    duration_seconds: f64,
    stream_url: String,
    schedule_url: Option<String>,
    home: Option<String>,
}

/// The interface nodes `GET {url}/api/cluster` lists (their base URLs),
/// for `--failover`; an error naming why when there is no such list.
async fn interface_nodes(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<String>> {
    let cluster_url = format!("{url}/api/cluster");
    let fetch = async {
        let response = client
            .get(&cluster_url)
            .send()
            .await
            .with_context(|| format!("cannot reach {cluster_url}"))?;
        let status = response.status();
        if !status.is_success() {
            bail!(
                "--failover needs a cluster's interface nodes, and {cluster_url} answered {status} \
                 (a single rondo serve has none)"
            );
        }
        let cluster: serde_json::Value = response
            .json()
            .await
            .with_context(|| format!("{cluster_url} did not return JSON"))?;
        let nodes: Vec<String> = cluster["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["role"] == "interface")
            .filter_map(|n| n["address"].as_str())
            .map(|a| a.trim_end_matches('/').to_string())
            .collect();
        if nodes.len() < 2 {
            bail!(
                "--failover needs at least two interface nodes; {cluster_url} lists {}",
                nodes.len()
            );
        }
        Ok(nodes)
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .with_context(|| format!("{cluster_url} did not answer within {timeout:?}"))?
}

/// How long the drain waits for the last streams: `--drain-timeout`, or
/// twice the longest title and a minute.
fn drain_timeout(config: &LoadConfig, titles: &[TitleInfo]) -> Duration {
    let longest_title = titles
        .iter()
        .map(|t| t.duration_seconds)
        .fold(0.0, f64::max);
    config
        .drain_timeout
        .unwrap_or_else(|| Duration::from_secs_f64(2.0 * longest_title + 60.0))
}

async fn fetch_titles(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<TitleInfo>> {
    let list_url = format!("{url}/api/titles");
    let fetch = async {
        let response = client
            .get(&list_url)
            .send()
            .await
            .with_context(|| format!("cannot reach the server at {url}"))?;
        let status = response.status();
        if !status.is_success() {
            bail!("{list_url} answered {status}; is {url} a rondo server?");
        }
        let listed = response
            .json::<Vec<ListedTitle>>()
            .await
            .with_context(|| format!("{list_url} did not return a list of titles"))?;
        // Titles whose home is a tier are left out: a request for one
        // measures its staging, not the array (docs/load.md).
        Ok(listed
            .into_iter()
            .filter(|t| t.home.is_none())
            .filter_map(|t| {
                Some(TitleInfo {
                    id: t.id?,
                    name: t.name,
                    duration_seconds: t.duration_seconds,
                    stream_url: t.stream_url,
                    schedule_url: t.schedule_url?,
                })
            })
            .collect::<Vec<_>>())
    };
    let titles = tokio::time::timeout(timeout, fetch)
        .await
        .with_context(|| format!("{list_url}: no answer within {timeout:?}"))??;
    if titles.is_empty() {
        bail!(
            "the server at {url} has no titles on its array to stream (titles whose home is a \
             tier are not streamed by rondo load); add some with `rondo ingest`"
        );
    }
    Ok(titles)
}

/// The load's HTTP client (the clients' and this process's own requests).
/// Which title each client asks for: Zipf, or one popular title.
fn title_choice(config: &LoadConfig, titles: usize, seed_offset: u64) -> TitleChoice {
    let seed = config.seed.wrapping_add(seed_offset);
    match config.popular_share {
        Some(share) => TitleChoice::popular(titles, share, seed),
        None => TitleChoice::zipf(titles, config.zipf_exponent, seed),
    }
}

fn http_client(config: &LoadConfig) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(config.client.header_timeout)
        .tcp_nodelay(true)
        .user_agent("rondo-load")
        .build()
        .context("building the HTTP client")
}

fn progress_bar(visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}").expect("valid"));
    bar
}

fn progress_message(live: &LiveCounters, phase: &str) -> String {
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    format!(
        "{phase}: {} requested, {} playing, {} rejected, {} errors, {} stalls, {} failovers",
        g(&live.requested),
        g(&live.active),
        g(&live.rejected),
        g(&live.errors) + g(&live.broken),
        g(&live.stalls),
        g(&live.failovers),
    )
}

async fn run(config: LoadConfig) -> anyhow::Result<Report> {
    let open_files_limit = rondo_server::raise_open_files_limit();
    let client = http_client(&config)?;
    let titles = fetch_titles(&client, &config.url, config.client.header_timeout).await?;
    let drain_timeout = drain_timeout(&config, &titles);
    let before = server_metrics::fetch(&client, &config.url, config.client.header_timeout).await;
    let failover: FailoverUrls = if config.failover {
        interface_nodes(&client, &config.url, config.client.header_timeout).await?
    } else {
        Vec::new()
    }
    .into();

    // Idle clients: opened (and admitted or not) before the first arrival.
    let mut idle_choice = title_choice(&config, titles.len(), IDLE_SEED_OFFSET);
    let mut opening = JoinSet::new();
    for index in 0..config.idle_clients {
        let title = titles[idle_choice.next_title()].clone();
        if !config.shard.owns(index) {
            continue;
        }
        let timeout = config.client.header_timeout;
        opening.spawn(async move { open_idle(index, title.id, &title.stream_url, timeout).await });
    }
    let mut idle_records: Vec<IdleRecord> = Vec::with_capacity(config.idle_clients);
    let mut idle_connections = Vec::new();
    while let Some(opened) = opening.join_next().await {
        let (record, connection) = opened.context("an idle client's task failed")?;
        idle_records.push(record);
        idle_connections.extend(connection);
    }

    let live = Arc::new(LiveCounters::default());
    let bar = progress_bar(config.progress);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let (phase_tx, phase_rx) = watch::channel("arriving");
    let ticker = {
        let live = Arc::clone(&live);
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROGRESS_TICK);
            loop {
                tick.tick().await;
                bar.set_message(progress_message(&live, *phase_rx.borrow()));
                bar.tick();
            }
        })
    };

    // Arrivals.
    let mut arrivals = PoissonArrivals::new(config.rate_per_s, config.seed);
    let mut choice = title_choice(&config, titles.len(), TITLE_SEED_OFFSET);
    let duration_s = config.duration.as_secs_f64();
    let run_start = Instant::now();
    let mut tasks: JoinSet<StreamRecord> = JoinSet::new();
    let mut records: Vec<StreamRecord> = Vec::new();
    // Streams whose record has not come back, for those cut at the drain.
    let mut pending: BTreeMap<usize, StreamPlan> = BTreeMap::new();
    let collect = |records: &mut Vec<StreamRecord>,
                   pending: &mut BTreeMap<usize, StreamPlan>,
                   done: Result<StreamRecord, tokio::task::JoinError>|
     -> anyhow::Result<()> {
        let record = done.context("a client task failed")?;
        pending.remove(&record.index);
        records.push(record);
        Ok(())
    };
    let mut index = 0usize;
    loop {
        let arrival_s = arrivals.next_arrival_rounds();
        if arrival_s >= duration_s || index >= config.max_streams {
            break;
        }
        tokio::time::sleep_until((run_start + Duration::from_secs_f64(arrival_s)).into()).await;
        let mut title = titles[choice.next_title()].clone();
        if !config.shard.owns(index) {
            index += 1;
            continue;
        }
        if config.entry_urls.len() > 1 {
            let base = &config.entry_urls[index % config.entry_urls.len()];
            title.stream_url = super::client::rebase(&title.stream_url, base);
        }
        let plan = StreamPlan {
            index,
            title,
            arrival_s,
            hash_body: index < config.verify_streams,
        };
        let (client, live, cancel) = (client.clone(), Arc::clone(&live), cancel_rx.clone());
        let (settings, failover) = (config.client, FailoverUrls::clone(&failover));
        pending.insert(index, plan.clone());
        tasks.spawn(async move {
            run_stream(client, plan, run_start, settings, failover, &live, cancel).await
        });
        index += 1;
        // Keep finished records out of the join set as we go.
        while let Some(done) = tasks.try_join_next() {
            collect(&mut records, &mut pending, done)?;
        }
    }

    // Drain: wait for the running streams, cut them at the drain timeout.
    let _ = phase_tx.send("draining");
    let drain_deadline = tokio::time::Instant::now() + drain_timeout;
    loop {
        match tokio::time::timeout_at(drain_deadline, tasks.join_next()).await {
            Ok(Some(done)) => collect(&mut records, &mut pending, done)?,
            Ok(None) => break,
            Err(_) => {
                let _ = cancel_tx.send(true);
                let cut_deadline = tokio::time::Instant::now() + CUT_GRACE;
                while let Ok(Some(done)) =
                    tokio::time::timeout_at(cut_deadline, tasks.join_next()).await
                {
                    collect(&mut records, &mut pending, done)?;
                }
                // Tasks still waiting for an answer: cut, recorded from their plan.
                tasks.abort_all();
                records.extend(pending.values().map(StreamRecord::unanswered));
                break;
            }
        }
    }
    let wall_s = run_start.elapsed().as_secs_f64();

    // Release the idle clients; give the server a round and a half to count
    // the last rounds' misses before reading its counters again.
    drop(idle_connections);
    let round_s = records.iter().find_map(|r| r.round_ms).unwrap_or(1000.0) / 1e3;
    tokio::time::sleep(Duration::from_secs_f64((1.5 * round_s).min(5.0))).await;
    let after = server_metrics::fetch(&client, &config.url, config.client.header_timeout).await;

    let _ = phase_tx.send("verifying");
    let verify = if config.verify_streams > 0 {
        Some(verify(&client, &titles, &records, &config).await)
    } else {
        None
    };
    ticker.abort();
    bar.finish_and_clear();

    Ok(summarise(Collected {
        settings: run_settings(&config, drain_timeout, config.shard.count),
        titles,
        records,
        idle: idle_records,
        deadline_misses: server_metrics::deadline_misses(&before, &after),
        server_metrics_delta: server_metrics::api_delta(&before, &after),
        verify,
        open_files_limit,
        wall_s,
        cpu_s: process_cpu_s(),
        per_stream: config.per_stream,
    }))
}

/// The settings echoed into the report.
fn run_settings(config: &LoadConfig, drain_timeout: Duration, processes: usize) -> RunSettings {
    RunSettings {
        url: config.url.clone(),
        rate_per_s: config.rate_per_s,
        duration_s: config.duration.as_secs_f64(),
        zipf_exponent: config.zipf_exponent,
        popular_share: config.popular_share,
        seed: config.seed,
        max_streams: config.max_streams,
        idle_clients: config.idle_clients,
        warmup_s: config.warmup.as_secs_f64(),
        verify_streams: config.verify_streams,
        header_timeout_s: config.client.header_timeout.as_secs_f64(),
        read_timeout_s: config.client.read_timeout.as_secs_f64(),
        drain_timeout_s: drain_timeout.as_secs_f64(),
        playout_delay_ms: config.client.playout_delay.map(|d| d.as_secs_f64() * 1e3),
        processes,
    }
}

/// What this process reads from a child's `--json --per-stream` report.
#[derive(serde::Deserialize)]
struct ChildReport {
    streams: Vec<StreamRecord>,
    #[serde(default)]
    idle_streams: Vec<IdleRecord>,
    open_files_limit: Option<u64>,
    wall_s: f64,
}

/// Runs the load in `child_args.len()` child processes of this program
/// (each given its `rondo load ... --shard I/K --json --per-stream` line)
/// and merges their records into one report.
pub fn run_processes(config: LoadConfig, child_args: Vec<Vec<String>>) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let client = http_client(&config)?;
        let titles = fetch_titles(&client, &config.url, config.client.header_timeout).await?;
        let drain_timeout = drain_timeout(&config, &titles);
        let before =
            server_metrics::fetch(&client, &config.url, config.client.header_timeout).await;
        let program = std::env::current_exe().context("finding this program to run its clients")?;
        let count = child_args.len();
        let mut children = Vec::with_capacity(count);
        for (index, args) in child_args.into_iter().enumerate() {
            let child = std::process::Command::new(&program)
                .args(&args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .with_context(|| format!("starting client process {index} of {count}"))?;
            children.push(child);
        }
        let bar = progress_bar(config.progress);
        bar.set_message(format!("{count} client processes running"));
        bar.enable_steady_tick(PROGRESS_TICK);
        // Read one child's report after the other: they run on their own,
        // and a child whose report is not read yet waits only to print it.
        let outputs = tokio::task::spawn_blocking(move || {
            children
                .into_iter()
                .map(|c| c.wait_with_output())
                .collect::<Vec<_>>()
        })
        .await
        .context("waiting for the client processes")?;
        bar.finish_and_clear();
        let (mut records, mut idle) = (Vec::new(), Vec::new());
        let (mut open_files_limit, mut wall_s) = (None::<u64>, 0.0f64);
        for (index, output) in outputs.into_iter().enumerate() {
            let output =
                output.with_context(|| format!("waiting for client process {index} of {count}"))?;
            if !output.status.success() {
                bail!(
                    "client process {index} of {count} failed ({}); its error is above",
                    output.status
                );
            }
            let child: ChildReport = serde_json::from_slice(&output.stdout).with_context(|| {
                format!("client process {index} of {count} printed no readable report")
            })?;
            records.extend(child.streams);
            idle.extend(child.idle_streams);
            open_files_limit = match (open_files_limit, child.open_files_limit) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            wall_s = wall_s.max(child.wall_s);
        }
        // The children waited a round and a half after their streams for
        // the server to count the last misses.
        let after = server_metrics::fetch(&client, &config.url, config.client.header_timeout).await;
        Ok(summarise(Collected {
            settings: run_settings(&config, drain_timeout, count),
            titles,
            records,
            idle,
            deadline_misses: server_metrics::deadline_misses(&before, &after),
            server_metrics_delta: server_metrics::api_delta(&before, &after),
            verify: None,
            open_files_limit,
            wall_s,
            cpu_s: process_cpu_s(),
            per_stream: config.per_stream,
        }))
    })
}

/// Compares the hashed streams with one full GET per title, made now that
/// the load is over (the GET is paced like any stream: it takes the title's
/// duration).
async fn verify(
    client: &reqwest::Client,
    titles: &[TitleInfo],
    records: &[StreamRecord],
    config: &LoadConfig,
) -> VerifySummary {
    // The reference GETs are not part of the load: their own counters.
    let live = Arc::new(LiveCounters::default());
    let hashed: Vec<&StreamRecord> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed && r.body_fnv64.is_some())
        .collect();
    let mut ids: Vec<u64> = hashed.iter().map(|r| r.title_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let (_keep, never) = watch::channel(false);
    let mut references = JoinSet::new();
    for (n, &id) in ids.iter().enumerate() {
        let title = titles
            .iter()
            .find(|t| t.id == id)
            .expect("a listed title")
            .clone();
        let plan = StreamPlan {
            index: usize::MAX - n,
            title,
            arrival_s: 0.0,
            hash_body: true,
        };
        let (client, live, never) = (client.clone(), Arc::clone(&live), never.clone());
        let settings = config.client;
        references.spawn(async move {
            (
                id,
                run_stream(
                    client,
                    plan,
                    Instant::now(),
                    settings,
                    Vec::new().into(),
                    &live,
                    never,
                )
                .await,
            )
        });
    }
    let mut verified = Vec::new();
    while let Some(Ok((id, reference))) = references.join_next().await {
        let of_title: Vec<&&StreamRecord> = hashed.iter().filter(|r| r.title_id == id).collect();
        let (reference_fnv64, reference_error) = match reference.outcome {
            Outcome::Completed => (reference.body_fnv64.clone(), None),
            _ => (
                None,
                Some(
                    reference
                        .error
                        .clone()
                        .unwrap_or_else(|| format!("{:?}", reference.outcome)),
                ),
            ),
        };
        let matching = of_title
            .iter()
            .filter(|r| reference_fnv64.is_some() && r.body_fnv64 == reference_fnv64)
            .count();
        verified.push(VerifiedTitle {
            title_id: id,
            streams: of_title.len(),
            matching,
            reference_fnv64,
            reference_error,
        });
    }
    verified.sort_by_key(|v| v.title_id);
    VerifySummary {
        streams_checked: hashed.len(),
        mismatches: verified
            .iter()
            .filter(|v| v.reference_fnv64.is_some())
            .map(|v| v.streams - v.matching)
            .sum(),
        titles: verified,
    }
}

/// CPU seconds (user + system) of this process and of the children it has
/// waited for (the client processes of `--processes`).
fn process_cpu_s() -> f64 {
    [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN]
        .into_iter()
        .map(|who| {
            // SAFETY: `usage` is a plain struct that getrusage fills in.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `usage` is valid for writes for the call.
            if unsafe { libc::getrusage(who, &mut usage) } != 0 {
                return 0.0;
            }
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            seconds(usage.ru_utime) + seconds(usage.ru_stime)
        })
        .sum()
}
