//! Incremental defragmentation of the texture pool, through the allocator's
//! defragmentation API (`vkalloc::defrag`) and its ash helpers
//! (`vkalloc::vk::PreparedMove`).
//!
//! One pass per frame at most, with a byte limit ([`super::policy::defrag_pass_bytes`]):
//! - at the end of the frame's `prepare`, [`Compactor::begin`] starts a session
//!   on the texture pool alone (algorithm `Full`: images move toward the fullest
//!   blocks and lower offsets, so free ranges merge) and begins its pass. Main
//!   images that are busy this frame (written by this frame's upload batch) are
//!   pinned for the pass's planning, tails are pinned for good, and retired images
//!   are pinned when retired; a move of anything else the streamer does not hold
//!   is cancelled. Each move's new image is created and bound at its destination
//!   (`prepare_move`); the main image leaves `mains` while it moves;
//! - [`Compactor::record`] records the copies into the frame's own command buffer
//!   on the graphics queue, after the scene pass (`cmd_record_moves`: barriers
//!   before and after; the old image goes to `TRANSFER_SRC`, the new one ends in
//!   `SHADER_READ_ONLY_OPTIMAL`). The frame still samples the old image;
//! - once the frame's fence has signalled, [`Compactor::finish`] commits each move
//!   (`finish_move`: the old image is destroyed, the GPU being done with it),
//!   makes a view of the new image, points the descriptor at it (nothing in
//!   flight reads the set), destroys the old view and ends the pass, which frees
//!   the old ranges.
//!
//! While a move is open its old and new images are both allocated in the pool:
//! the pass limit keeps them within the budget (and the pool's hard budget holds
//! them anyway: destinations are taken from its blocks' free ranges).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ash::vk;
use vkalloc::vk::{AshDevice, Movable, PreparedMove};
use vkalloc::{Allocator, DefragAlgorithm, DefragDesc, Defragmentation};

use crate::gpu::util::OneShot;
use crate::gpu::{Context, GpuError, GpuMemory};
use crate::materials::textures::{Texture, TextureSet};

/// Moves a pass hands out, at most.
pub const MAX_MOVES_PER_PASS: u32 = 64;

/// The start alignment a pass that opens room asks for: large optimal images'
/// (64 KiB on the H200; lavapipe's are smaller).
const ROOM_ALIGNMENT: u64 = 64 << 10;

/// A main image's description while its image is inside a move.
struct Parked {
    texture: usize,
    path: std::path::PathBuf,
    view: vk::ImageView,
    format: vk::Format,
    file_size: u32,
    base_level: u32,
    file_levels: u32,
    bytes: u64,
    allocation_bytes: u64,
}

impl Parked {
    fn texture(&self, image: vkalloc::vk::Image, view: vk::ImageView) -> Texture {
        Texture {
            path: self.path.clone(),
            view,
            image,
            format: self.format,
            file_size: self.file_size,
            base_level: self.base_level,
            file_levels: self.file_levels,
            bytes: self.bytes,
        }
    }
}

struct OpenPass {
    session: Defragmentation,
    prepared: Vec<PreparedMove>,
    parked: Vec<Parked>,
    /// Whether the copies were recorded into a frame's command buffer.
    recorded: AtomicBool,
}

/// What a finished pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassDone {
    /// Bytes of the images moved.
    pub bytes_moved: u64,
    /// Images moved.
    pub moved: u64,
}

/// The texture pool's defragmentation passes.
pub struct Compactor {
    allocator: Arc<Allocator<AshDevice>>,
    open: Option<OpenPass>,
}

fn defrag_err(e: impl std::fmt::Display) -> GpuError {
    GpuError::Other(format!("texture pool defragmentation: {e}"))
}

impl Compactor {
    /// A compactor on `mem`'s allocator.
    pub fn new(mem: &GpuMemory) -> Self {
        Self {
            allocator: mem.allocator().clone(),
            open: None,
        }
    }

    /// Whether a pass is open (its copies recorded or about to be).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Bytes the open pass holds twice: each moving image's old allocation and
    /// its destination (the same size).
    pub fn moving_bytes(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| {
            o.parked.iter().map(|p| 2 * p.allocation_bytes).sum::<u64>()
        })
    }

    /// The base level and allocation bytes of texture `texture`'s main image,
    /// when it is inside the open pass.
    pub fn parked(&self, texture: usize) -> Option<(u32, u64)> {
        self.open.as_ref().and_then(|o| {
            o.parked
                .iter()
                .find(|p| p.texture == texture)
                .map(|p| (p.base_level, p.allocation_bytes))
        })
    }

    /// Begins a pass of at most `pass_bytes` over the texture pool and prepares
    /// its moves: the main images moved leave `mains` until [`Self::finish`].
    /// `busy[i]`: texture `i`'s main image is used by work of this frame other
    /// than sampling (it is pinned for the planning and never moved).
    ///
    /// With `room` (the bytes of a grow that fits the budget but no free range)
    /// the pass opens one free range of that size (`DefragAlgorithm::Room`: the
    /// window holding the fewest movable bytes is emptied into free ranges
    /// outside it); when no window can be emptied, or a range is free already, it
    /// compacts instead (`Full`).
    pub fn begin(
        &mut self,
        set: &TextureSet,
        mains: &mut [Option<Texture>],
        busy: &[bool],
        pass_bytes: u64,
        room: Option<u64>,
    ) -> Result<(), GpuError> {
        if self.open.is_some() || pass_bytes == 0 {
            return Ok(());
        }
        if let Some(bytes) = room {
            // The mechanism places an image in a free range of its texel bytes
            // (`main_bytes`); the alignment is asked for separately.
            let room = DefragAlgorithm::Room {
                bytes,
                alignment: ROOM_ALIGNMENT,
            };
            self.begin_with(set, mains, busy, pass_bytes, room)?;
            if self.open.is_some() {
                return Ok(());
            }
        }
        self.begin_with(set, mains, busy, pass_bytes, DefragAlgorithm::Full)
    }

    /// [`Self::begin`] with one algorithm; leaves `self.open` empty when the pass
    /// has nothing to move.
    fn begin_with(
        &mut self,
        set: &TextureSet,
        mains: &mut [Option<Texture>],
        busy: &[bool],
        pass_bytes: u64,
        algorithm: DefragAlgorithm,
    ) -> Result<(), GpuError> {
        let a = &self.allocator;
        let pin = |movable: bool| {
            for (m, _) in mains.iter().zip(busy).filter(|(_, b)| **b) {
                if let Some(t) = m {
                    if let Err(e) = a.set_movable(t.image.allocation(), movable) {
                        log::warn!("streaming: pinning a busy image: {e}");
                    }
                }
            }
        };
        let desc = DefragDesc::default()
            .with_algorithm(algorithm)
            .only_pools(vec![set.texture_pool])
            .with_pass_limits(pass_bytes, MAX_MOVES_PER_PASS);
        let mut session = a.begin_defragmentation(&desc).map_err(defrag_err)?;
        pin(false);
        let moves = session.begin_pass(a);
        // Pins take effect when a pass is planned: the busy images are movable
        // again for the next frame's pass.
        pin(true);
        let moves = moves.map_err(defrag_err)?;
        let mut prepared = Vec::new();
        let mut parked = Vec::new();
        for mv in moves {
            let owner = mains.iter().position(|m| {
                m.as_ref()
                    .is_some_and(|t| t.image.allocation().id() == mv.id())
            });
            let Some(i) = owner.filter(|&i| !busy[i]) else {
                session.cancel(mv);
                continue;
            };
            let Some(t) = mains[i].take() else {
                session.cancel(mv);
                continue;
            };
            let p = Parked {
                texture: i,
                path: t.path.clone(),
                view: t.view,
                format: t.format,
                file_size: t.file_size,
                base_level: t.base_level,
                file_levels: t.file_levels,
                bytes: t.bytes,
                allocation_bytes: t.allocation_bytes(),
            };
            let old = Movable::Image {
                image: t.image,
                layout: vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
            };
            // SAFETY: the image is live on this allocator's device.
            match unsafe { a.prepare_move(mv, old) } {
                Ok(m) => {
                    prepared.push(m);
                    parked.push(p);
                }
                Err(e) => {
                    log::warn!("streaming: a texture move could not be prepared: {e}");
                    let (mv, old) = *e.parts;
                    session.cancel(mv);
                    match old {
                        Movable::Image { image, .. } => mains[i] = Some(p.texture(image, p.view)),
                        Movable::Buffer(_) => {
                            log::error!("streaming: an image move handed a buffer back")
                        }
                    }
                }
            }
        }
        if prepared.is_empty() {
            session.end(a).map_err(defrag_err)?;
            return Ok(());
        }
        self.open = Some(OpenPass {
            session,
            prepared,
            parked,
            recorded: AtomicBool::new(false),
        });
        Ok(())
    }

    /// Records the open pass's copies (after the scene pass, which sampled the
    /// old images; the next frame samples the new ones).
    ///
    /// # Safety
    /// `cmd` is recording on the renderer's queue, outside a render pass; the
    /// frame is waited for before [`Self::finish`].
    pub unsafe fn record(&self, cmd: vk::CommandBuffer) {
        if let Some(o) = self.open.as_ref() {
            if !o.recorded.swap(true, Ordering::Relaxed) {
                // SAFETY: per the contract above; the moves stay alive (in
                // `self.open`) until `finish`, after the frame's fence.
                unsafe { self.allocator.cmd_record_moves(cmd, &o.prepared) };
            }
        }
    }

    /// Ends the open pass: the GPU is done with the frame that recorded its
    /// copies (if no frame recorded them, they run now, waited for). Commits
    /// every move, swaps the descriptors to the new images, frees the old ones.
    pub fn finish(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        mains: &mut [Option<Texture>],
    ) -> Result<Option<PassDone>, GpuError> {
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        let a = self.allocator.clone();
        let d = &ctx.device;
        if !open.recorded.load(Ordering::Relaxed) {
            // Prepared but never rendered (a window's swapchain went out of
            // date): copy now.
            let one = OneShot::new(ctx)?;
            let r = one.run(ctx, |cmd| {
                // SAFETY: recording on the renderer's queue outside a render
                // pass; `run` waits for the copies; the moves outlive them.
                unsafe { a.cmd_record_moves(cmd, &open.prepared) }
            });
            one.destroy(d);
            if let Err(e) = r {
                // The moves can't complete: wait for the device so that they
                // are committed with nothing in flight, contents lost.
                ctx.wait_idle();
                log::error!("streaming: defragmentation copies failed: {e}");
            }
        }
        let OpenPass {
            mut session,
            prepared,
            parked,
            ..
        } = open;
        let mut error = None;
        for (m, p) in prepared.into_iter().zip(parked) {
            // SAFETY: the copies completed (the frame recording them is done, or
            // the one-shot above waited); nothing in flight reads the old image.
            match unsafe { a.finish_move(&mut session, m) } {
                Ok(Movable::Image { image, .. }) => {
                    let levels = p.file_levels - p.base_level;
                    // SAFETY: the image is live and bound, with `levels` levels.
                    let view =
                        unsafe { crate::gpu::util::texture_view(d, image.raw(), p.format, levels) };
                    match view {
                        Ok(view) => {
                            set.write_view(d, p.texture, view);
                            mains[p.texture] = Some(p.texture(image, view));
                        }
                        Err(e) => {
                            // Back to the tail; the moved image is freed.
                            set.write_view(d, p.texture, set.textures[p.texture].view);
                            // SAFETY: the image was never used by pending work
                            // since its copy completed.
                            unsafe { mem.destroy_image(image) };
                            error.get_or_insert(e);
                        }
                    }
                    // SAFETY: the descriptor no longer names the old view and no
                    // pending work uses it.
                    unsafe { d.destroy_image_view(p.view, None) };
                }
                Ok(Movable::Buffer(_)) => {
                    log::error!("streaming: an image move handed a buffer back");
                }
                Err(e) => {
                    // Refused: the old image comes back, still bound where it was.
                    log::warn!("streaming: a texture move was not committed: {e}");
                    match e.parts.1 {
                        Movable::Image { image, .. } => {
                            mains[p.texture] = Some(p.texture(image, p.view));
                        }
                        Movable::Buffer(_) => {
                            log::error!("streaming: an image move handed a buffer back")
                        }
                    }
                }
            }
        }
        let report = session.end_pass(&a).map_err(defrag_err)?;
        session.end(&a).map_err(defrag_err)?;
        if let Some(e) = error {
            return Err(e);
        }
        Ok(Some(PassDone {
            bytes_moved: report.stats.bytes_moved,
            moved: report.stats.allocations_moved,
        }))
    }
}
