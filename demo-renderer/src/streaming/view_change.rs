//! Abrupt view changes, found without an announced cut: what the streamer
//! can know of them and when (pure, unit-tested).
//!
//! - The *pose jump* is known before the frame renders: the eye steps
//!   farther, the view direction turns wider or the field of view changes
//!   more in one frame than flying does ([`ViewTuning`]'s thresholds). The
//!   frame is answered as an announced cut is ([`super::Streamer::prepare`]):
//!   the present view's CPU wants first, the old view's levels no longer
//!   wanted, and the frame's caps raised; but where the jump keeps part of
//!   the old view on screen ([`overlaps`]: a swing) and the present view
//!   still shows a material, what the last feedback wanted on it stays wanted
//!   ([`join_jump_cells`]; by levels the finer of the two): a swing keeps
//!   much of the old view on screen, and the CPU wants alone gave up levels
//!   it still showed (on lavapipe a swing of 12-23 degrees a frame fell from
//!   31.5 to 21 dB), while after a teleport the join kept the old view's
//!   wants and the new one waited (46.5 -> 22.9 dB).
//! - The *feedback change* is known a frame late: the feedback of the frame
//!   just drawn wants, on a large share of its samples, levels finer than the
//!   frame before wanted on their material ([`fresh_share`]; a material the
//!   frame before did not see counts whole). The frame that drew it has passed;
//!   the next one gets the raised caps, for the refill.
//!
//! An announced cut needs no detection; the report says which it was
//! ([`ViewChange`]).
#![forbid(unsafe_code)]

use super::estimate::View;
use crate::tuning::ViewTuning;

/// What a frame's view did, as the report's `view_change` says it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViewChange {
    /// Nothing abrupt.
    #[default]
    None,
    /// The camera announced a cut (the script).
    Cut,
    /// The pose jumped without an announced cut (found before the frame).
    Jump,
    /// The frame's feedback wanted a new set at once (found after it).
    Feedback,
}

impl ViewChange {
    /// Whether anything abrupt happened.
    pub fn is_change(self) -> bool {
        self != Self::None
    }
}

fn direction(v: &View) -> glam::Vec3 {
    (v.pose.target - v.pose.eye).normalize_or(glam::Vec3::NEG_Z)
}

/// Whether going from `from` to `to` in one frame is a jump by `t`'s
/// thresholds: the eye's step, the view direction's turn or the field of
/// view's change above them.
pub fn pose_jump(from: &View, to: &View, t: &ViewTuning) -> bool {
    let step = (to.pose.eye - from.pose.eye).length();
    let turn = direction(from).angle_between(direction(to)).to_degrees();
    let fov = (to.fov_y - from.fov_y).abs().to_degrees();
    step > t.jump_step || turn > t.jump_turn_deg || fov > t.jump_fov_deg
}

/// How many jump steps ([`ViewTuning::jump_step`]) the eye may move in a
/// frame and still keep part of the old view on screen ([`overlaps`]): fast
/// flight (the script's end moves up to 1.9 units a frame), not a teleport
/// (the shipped recorded paths' move 5.8-10.9).
pub const OVERLAP_STEPS: f32 = 3.0;

/// Whether a jump from `from` to `to` keeps part of the old view on screen:
/// the eye stepped no farther than [`OVERLAP_STEPS`] jump steps, the view
/// direction turned less than half the horizontal field of view, and the
/// field of view stayed within a jump's change. A swing of the mouse or fast
/// flight does; a cut, a teleport or a flick past half the frame does not. Such a jump joins the feedback's
/// wants with the present view's ([`join_jump_cells`]); any other takes the
/// present view's alone, as an announced cut does.
pub fn overlaps(from: &View, to: &View, t: &ViewTuning) -> bool {
    let step = (to.pose.eye - from.pose.eye).length();
    let turn = direction(from).angle_between(direction(to));
    let half_x = ((to.fov_y * 0.5).tan() * to.aspect).atan();
    let fov = (to.fov_y - from.fov_y).abs().to_degrees();
    step <= t.jump_step * OVERLAP_STEPS && turn < half_x && fov <= t.jump_fov_deg
}

/// The share of `now`'s samples that want, on their material, a level finer
/// than any `before` wanted on it (all of a material `before` did not see):
/// each element is a material's histogram of samples by wanted level, finest
/// first. 0 when `now` has no samples.
pub fn fresh_share<H: AsRef<[u32]>>(before: &[H], now: &[H]) -> f64 {
    let (mut fresh, mut total) = (0u64, 0u64);
    for (m, h) in now.iter().enumerate() {
        let finest_before = before
            .get(m)
            .and_then(|b| b.as_ref().iter().position(|&n| n > 0))
            .unwrap_or(usize::MAX);
        for (level, &n) in h.as_ref().iter().enumerate() {
            total += u64::from(n);
            if level < finest_before {
                fresh += u64::from(n);
            }
        }
    }
    if total == 0 {
        0.0
    } else {
        fresh as f64 / total as f64
    }
}

/// A frame's view change found before it renders: an announced cut, else a
/// pose jump from `last` (the view of the frame before; none on the first).
pub fn before_frame(
    announced: bool,
    last: Option<&View>,
    now: &View,
    t: &ViewTuning,
) -> ViewChange {
    if announced {
        ViewChange::Cut
    } else if last.is_some_and(|l| pose_jump(l, now, t)) {
        ViewChange::Jump
    } else {
        ViewChange::None
    }
}

/// A frame's view change once its feedback is read: `before` (what
/// [`before_frame`] found) where it found one, else a feedback change where
/// `share` (the frame's [`fresh_share`] against the frame before, `None`
/// without both feedbacks) is above `t.feedback_share`.
pub fn after_frame(before: ViewChange, share: Option<f64>, t: &ViewTuning) -> ViewChange {
    match (before, share) {
        (ViewChange::None, Some(s)) if s > t.feedback_share => ViewChange::Feedback,
        (b, _) => b,
    }
}

/// By tiles, a jump's wanted cells: the present view's cast (`cast`, per
/// material `cells` cells of wanted level and hits; `unseen` where no ray
/// landed) joined with the last feedback's (`feedback`, the same layout) on
/// the materials the cast sees: a turn of a few tens of degrees keeps most
/// of the old view on screen, and the cast's coarse grid would give up
/// levels the feedback knows it wants. A material the cast does not see
/// keeps nothing of the feedback: the old view's tiles go first. Without
/// feedback (or of another layout), the cast alone.
pub fn join_jump_cells(
    cast: (&[u8], &[u32]),
    feedback: Option<(&[u8], &[u32])>,
    cells: usize,
    unseen: u8,
) -> (Vec<u8>, Vec<u32>) {
    let (mut wants, mut hits) = (cast.0.to_vec(), cast.1.to_vec());
    let Some((fw, fh)) = feedback.filter(|f| f.0.len() == wants.len() && f.1.len() == hits.len())
    else {
        return (wants, hits);
    };
    for start in (0..wants.len()).step_by(cells.max(1)) {
        let end = (start + cells.max(1)).min(wants.len());
        if !wants[start..end].iter().any(|&w| w != unseen) {
            continue;
        }
        for k in start..end {
            if fw[k] != unseen && (wants[k] == unseen || fw[k] < wants[k]) {
                wants[k] = fw[k];
            }
            hits[k] = hits[k].max(fh[k]);
        }
    }
    (wants, hits)
}

/// A per-frame cap (operations or bytes) raised `factor` times on a frame
/// that answers a view change (`raise`), else as it is.
pub fn raised(cap: u64, raise: bool, factor: u32) -> u64 {
    if raise {
        cap.saturating_mul(u64::from(factor.max(1)))
    } else {
        cap
    }
}

/// [`raised`] for a count.
pub fn raised_count(cap: usize, raise: bool, factor: u32) -> usize {
    usize::try_from(raised(cap as u64, raise, factor)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Pose;
    use glam::Vec3;

    fn view(eye: Vec3, dir: Vec3, fov_deg: f32) -> View {
        View {
            pose: Pose {
                eye,
                target: eye + dir * 3.0,
            },
            fov_y: fov_deg.to_radians(),
            aspect: 16.0 / 9.0,
            height: 180,
            cut: false,
        }
    }

    #[test]
    fn steps_turns_and_fov_changes_above_the_thresholds_are_jumps() {
        let t = ViewTuning::default();
        let a = view(Vec3::ZERO, Vec3::NEG_Z, 50.0);
        let walk = view(Vec3::new(0.1, 0.0, 0.0), Vec3::NEG_Z, 50.0);
        assert!(!pose_jump(&a, &walk, &t));
        let teleport = view(Vec3::new(t.jump_step + 0.1, 0.0, 0.0), Vec3::NEG_Z, 50.0);
        assert!(pose_jump(&a, &teleport, &t));
        let small = (t.jump_turn_deg - 1.0).to_radians();
        let glance = view(Vec3::ZERO, Vec3::new(small.sin(), 0.0, -small.cos()), 50.0);
        assert!(!pose_jump(&a, &glance, &t));
        let wide = (t.jump_turn_deg + 1.0).to_radians();
        let swing = view(Vec3::ZERO, Vec3::new(wide.sin(), 0.0, -wide.cos()), 50.0);
        assert!(pose_jump(&a, &swing, &t));
        let zoom = view(Vec3::ZERO, Vec3::NEG_Z, 50.0 + t.jump_fov_deg + 1.0);
        assert!(pose_jump(&a, &zoom, &t));
        assert!(!pose_jump(&a, &view(Vec3::ZERO, Vec3::NEG_Z, 51.0), &t));
    }

    #[test]
    fn a_swing_overlaps_the_old_view_a_flick_or_a_teleport_does_not() {
        let t = ViewTuning::default();
        let a = view(Vec3::ZERO, Vec3::NEG_Z, 50.0);
        // 16:9 at 50 degrees: about 79 degrees across, half of it 39.6.
        let turn = |deg: f32| {
            let r = deg.to_radians();
            view(Vec3::ZERO, Vec3::new(r.sin(), 0.0, -r.cos()), 50.0)
        };
        assert!(overlaps(&a, &turn(28.0), &t));
        assert!(overlaps(&a, &turn(39.0), &t));
        assert!(!overlaps(&a, &turn(41.0), &t));
        assert!(!overlaps(&a, &turn(90.0), &t));
        let flight = view(Vec3::new(t.jump_step * 2.0, 0.0, 0.0), Vec3::NEG_Z, 50.0);
        assert!(overlaps(&a, &flight, &t));
        let teleport = view(Vec3::new(9.0, 0.0, 0.0), Vec3::NEG_Z, 50.0);
        assert!(!overlaps(&a, &teleport, &t));
        assert!(!overlaps(&a, &view(Vec3::ZERO, Vec3::NEG_Z, 70.0), &t));
    }

    #[test]
    fn an_announced_cut_comes_first_then_the_jump_then_the_feedback() {
        let t = ViewTuning::default();
        let a = view(Vec3::ZERO, Vec3::NEG_Z, 50.0);
        let far = view(Vec3::new(9.0, 0.0, 0.0), Vec3::NEG_Z, 50.0);
        assert_eq!(before_frame(true, Some(&a), &a, &t), ViewChange::Cut);
        assert_eq!(before_frame(false, Some(&a), &far, &t), ViewChange::Jump);
        assert_eq!(before_frame(false, None, &far, &t), ViewChange::None);
        assert_eq!(before_frame(false, Some(&a), &a, &t), ViewChange::None);
        let high = Some(t.feedback_share + 0.1);
        let low = Some(t.feedback_share - 0.1);
        assert_eq!(
            after_frame(ViewChange::None, high, &t),
            ViewChange::Feedback
        );
        assert_eq!(after_frame(ViewChange::None, low, &t), ViewChange::None);
        assert_eq!(after_frame(ViewChange::None, None, &t), ViewChange::None);
        assert_eq!(after_frame(ViewChange::Jump, high, &t), ViewChange::Jump);
        assert_eq!(after_frame(ViewChange::Cut, low, &t), ViewChange::Cut);
    }

    #[test]
    fn fresh_share_counts_finer_levels_and_new_materials() {
        // Material 0 at levels 3..4, material 1 unseen.
        let before: [Vec<u32>; 2] = [vec![0, 0, 0, 10, 10], vec![0, 0, 0, 0, 0]];
        // The same: nothing fresh.
        assert_eq!(fresh_share(&before, &before), 0.0);
        // Coarser or equal levels on a seen material are not fresh.
        let coarser = [vec![0, 0, 0, 5, 30], vec![0; 5]];
        assert_eq!(fresh_share(&before, &coarser), 0.0);
        // One finer level on 10 of 40 samples.
        let closer = [vec![0, 0, 10, 10, 20], vec![0; 5]];
        assert!((fresh_share(&before, &closer) - 0.25).abs() < 1e-12);
        // A material the frame before did not see counts whole.
        let swing = [vec![0, 0, 0, 5, 5], vec![0, 10, 20, 0, 0]];
        assert!((fresh_share(&before, &swing) - 0.75).abs() < 1e-12);
        // No samples, no share.
        assert_eq!(fresh_share(&before, &[vec![0; 5], vec![0; 5]]), 0.0);
        // More materials now than before: the new ones are fresh.
        assert_eq!(fresh_share(&before[..1], &swing), 0.75);
    }

    #[test]
    fn a_jump_joins_the_feedback_on_the_materials_the_cast_sees() {
        const U: u8 = u8::MAX;
        // Two materials of 3 cells; the cast sees material 0 alone.
        let cast = (vec![4, U, 2, U, U, U], vec![5, 0, 9, 0, 0, 0]);
        let fb = (vec![3, 1, U, 0, 0, U], vec![7, 2, 0, 8, 8, 0]);
        let (w, h) = join_jump_cells((&cast.0, &cast.1), Some((&fb.0, &fb.1)), 3, U);
        // Material 0: the finer of both per cell, the larger hits.
        assert_eq!(&w[..3], &[3, 1, 2]);
        assert_eq!(&h[..3], &[7, 2, 9]);
        // Material 1, out of the cast: the old view's cells are not wanted.
        assert_eq!(&w[3..], &[U, U, U]);
        assert_eq!(&h[3..], &[0, 0, 0]);
        // Without feedback, or of another layout: the cast alone.
        assert_eq!(join_jump_cells((&cast.0, &cast.1), None, 3, U).0, cast.0);
        let short = Some((&fb.0[..3], &fb.1[..3]));
        assert_eq!(join_jump_cells((&cast.0, &cast.1), short, 3, U).1, cast.1);
    }

    #[test]
    fn caps_rise_only_when_asked() {
        assert_eq!(raised(16, false, 4), 16);
        assert_eq!(raised(16, true, 4), 64);
        assert_eq!(raised(u64::MAX, true, 4), u64::MAX);
        assert_eq!(raised(8, true, 0), 8);
        assert_eq!(raised_count(16, true, 4), 64);
        assert_eq!(raised_count(usize::MAX, true, 4), usize::MAX);
    }
}
