//! Synthetic titles for simulations: seed 000's Table 3 VBR titles (trace
//! seed 1), whole or cut to their first rounds, with 1 s rounds and 16 KiB
//! blocks. Tests and the differential test share them.

use rondo_media::synth;
use rondo_model::schedule::Schedule;
use rondo_model::units::{BLOCK_BYTES_DEFAULT, ROUND_DURATION_NS_DEFAULT};

use crate::run::SimTitle;

/// The first `count` of the six Table 3 titles, cut to their first `rounds`
/// rounds so that short runs see many starts and ends.
pub fn table3_cut(rounds: usize, count: usize) -> Vec<SimTitle> {
    synth::known_kinds()
        .iter()
        .filter(|k| matches!(k, synth::TraceKind::Vbr(_)))
        .take(count)
        .map(|&k| {
            let full = Schedule::from_frames(
                &synth::generate(k, 1),
                ROUND_DURATION_NS_DEFAULT,
                BLOCK_BYTES_DEFAULT,
            )
            .expect("the synthetic traces make schedules");
            let rounds = rounds.min(full.rounds());
            SimTitle {
                name: k.name().into(),
                schedule: Schedule::from_client_bytes(
                    full.client_bytes[..rounds].to_vec(),
                    full.round_duration_ns,
                    full.block_bytes,
                )
                .expect("a prefix of a schedule is a schedule"),
            }
        })
        .collect()
}
