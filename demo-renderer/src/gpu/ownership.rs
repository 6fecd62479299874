//! The barriers of a streaming upload batch, as plain data: which queue records
//! which barrier, and the queue-family ownership transfers (release on the upload
//! queue, acquire on the graphics queue) when the uploads go on a transfer-only
//! queue. Recorded by [`crate::streaming::mechanism`]; unit-tested here, since
//! lavapipe has one queue family and cannot run the transfer path.
//!
//! # The transfer path
//!
//! New images are created `EXCLUSIVE` and first used on the upload queue, which
//! takes ownership of them as of a new resource (their contents are undefined
//! anyway). For each image that receives levels from staging:
//!
//! 1. upload queue: `UNDEFINED -> TRANSFER_DST_OPTIMAL` (all its levels), the
//!    buffer-to-image copies, then the **release**: `TRANSFER_DST_OPTIMAL ->
//!    TRANSFER_DST_OPTIMAL`, families upload -> graphics, first scope `COPY` /
//!    `TRANSFER_WRITE` (the copies' writes made available), second scope `NONE`
//!    (ignored for a release). The batch signals a binary semaphore at
//!    [`SIGNAL_STAGE`] (`ALL_COMMANDS`: after the copies and the release).
//! 2. graphics queue, in a submission that waits for that semaphore at
//!    [`WAIT_STAGE`] (`COPY`): the matching **acquire** (same image, levels,
//!    layouts and families; first scope `COPY`, which the semaphore wait's
//!    second scope covers, so they chain; its access mask is ignored), second
//!    scope `COPY` / `TRANSFER_WRITE | TRANSFER_READ`. The layouts are equal, so
//!    no layout transition happens on either side.
//! 3. graphics queue, same command buffer: the levels both images hold are
//!    copied from the old image, which stays with the graphics family and is
//!    never transferred (it is sampled by the frames around it: moving it to the
//!    transfer queue and back would cost two more ownership transfers for copies
//!    the graphics queue does as fast), then every level of the new image goes to
//!    `SHADER_READ_ONLY_OPTIMAL` with a barrier from `COPY` / `TRANSFER_WRITE` to
//!    the sampling stages (`util::SAMPLING_STAGES`: fragment and compute) /
//!    `SHADER_SAMPLED_READ`, whose second scope covers the
//!    frames submitted later on the graphics queue.
//!
//! An image that gets no level from staging (a shrink: every level it keeps is
//! in the old image) never visits the upload queue: `UNDEFINED ->
//! TRANSFER_DST_OPTIMAL` on the graphics queue.
//!
//! Without a separate upload queue, one graphics command buffer does it all, as
//! before: every new image `UNDEFINED -> TRANSFER_DST_OPTIMAL`, both kinds of
//! copies, `SHADER_READ_ONLY_OPTIMAL`. In the test mode (two submissions on the
//! graphics queue, `--tune upload-split=1`) the families are equal: no
//! release, and the graphics side's barrier is a plain one from the copies'
//! writes to the copies that follow (the semaphore orders the submissions).
#![forbid(unsafe_code)]

use ash::vk;

use super::util::{ImageTransition, SAMPLING_STAGES};

/// The upload queue's semaphore signal: after everything the batch did.
pub const SIGNAL_STAGE: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::ALL_COMMANDS;
/// The graphics submission's wait: its copies and the acquire's first scope.
pub const WAIT_STAGE: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::COPY;

/// The families of a split upload batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadFamilies {
    /// The graphics queue's family (owns the images after the batch).
    pub graphics: u32,
    /// The upload queue's family (equal to `graphics` in the test mode).
    pub upload: u32,
}

impl UploadFamilies {
    /// Whether images change family (a transfer-only upload queue).
    pub fn transfers_ownership(&self) -> bool {
        self.graphics != self.upload
    }
}

/// One replacement of a batch.
#[derive(Clone, Copy, Debug)]
pub struct BatchImage {
    /// The new image and its level count.
    pub new: (vk::Image, u32),
    /// Whether it receives levels from staging.
    pub uploads: bool,
    /// The image its other levels are copied from (sampled, owned by the
    /// graphics family) and the level count to transition.
    pub source: (vk::Image, u32),
}

/// The barriers of one batch, in recording order.
#[derive(Clone, Debug, Default)]
pub struct UploadBarriers {
    /// Upload queue, before its copies from staging.
    pub upload_before: Vec<ImageTransition>,
    /// Upload queue, after them: the releases.
    pub upload_release: Vec<ImageTransition>,
    /// Graphics queue, first: acquires, new images without uploads made copy
    /// destinations, sources made copy sources.
    pub graphics_before: Vec<ImageTransition>,
    /// Graphics queue, after every copy: all to `SHADER_READ_ONLY_OPTIMAL`.
    pub graphics_after: Vec<ImageTransition>,
}

impl UploadBarriers {
    /// Whether the batch has work for the upload queue.
    pub fn uses_upload_queue(&self) -> bool {
        !self.upload_before.is_empty()
    }
}

const DST: vk::ImageLayout = vk::ImageLayout::TRANSFER_DST_OPTIMAL;
const SRC: vk::ImageLayout = vk::ImageLayout::TRANSFER_SRC_OPTIMAL;
const READ: vk::ImageLayout = vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL;

fn levels(t: ImageTransition, count: u32) -> ImageTransition {
    ImageTransition {
        mips: (0, count),
        ..t
    }
}

fn to_copy_destination(image: vk::Image, count: u32) -> ImageTransition {
    levels(
        ImageTransition::color(image, vk::ImageLayout::UNDEFINED, DST).stages(
            vk::PipelineStageFlags2::NONE,
            vk::AccessFlags2::NONE,
            vk::PipelineStageFlags2::COPY,
            vk::AccessFlags2::TRANSFER_WRITE,
        ),
        count,
    )
}

/// The barriers of a batch of `images`. `split`: the families when the uploads
/// go in a submission of their own (a transfer-only queue, or the test mode);
/// `None`: one graphics command buffer.
pub fn upload_barriers(split: Option<UploadFamilies>, images: &[BatchImage]) -> UploadBarriers {
    let mut out = UploadBarriers::default();
    for b in images {
        let (image, count) = b.new;
        match split {
            Some(f) if b.uploads => {
                out.upload_before.push(to_copy_destination(image, count));
                let copied = ImageTransition::color(image, DST, DST);
                if f.transfers_ownership() {
                    out.upload_release.push(levels(
                        copied
                            .stages(
                                vk::PipelineStageFlags2::COPY,
                                vk::AccessFlags2::TRANSFER_WRITE,
                                vk::PipelineStageFlags2::NONE,
                                vk::AccessFlags2::NONE,
                            )
                            .ownership(f.upload, f.graphics),
                        count,
                    ));
                    out.graphics_before.push(levels(
                        copied
                            .stages(
                                WAIT_STAGE,
                                vk::AccessFlags2::NONE,
                                vk::PipelineStageFlags2::COPY,
                                vk::AccessFlags2::TRANSFER_WRITE | vk::AccessFlags2::TRANSFER_READ,
                            )
                            .ownership(f.upload, f.graphics),
                        count,
                    ));
                } else {
                    out.graphics_before.push(levels(
                        copied.stages(
                            vk::PipelineStageFlags2::COPY,
                            vk::AccessFlags2::TRANSFER_WRITE,
                            vk::PipelineStageFlags2::COPY,
                            vk::AccessFlags2::TRANSFER_WRITE | vk::AccessFlags2::TRANSFER_READ,
                        ),
                        count,
                    ));
                }
            }
            _ => out.graphics_before.push(to_copy_destination(image, count)),
        }
        let (source, source_count) = b.source;
        out.graphics_before.push(levels(
            ImageTransition::color(source, READ, SRC).stages(
                SAMPLING_STAGES,
                vk::AccessFlags2::NONE,
                vk::PipelineStageFlags2::COPY,
                vk::AccessFlags2::TRANSFER_READ,
            ),
            source_count,
        ));
        out.graphics_after.push(levels(
            ImageTransition::color(image, DST, READ).stages(
                vk::PipelineStageFlags2::COPY,
                vk::AccessFlags2::TRANSFER_WRITE,
                SAMPLING_STAGES,
                vk::AccessFlags2::SHADER_SAMPLED_READ,
            ),
            count,
        ));
        out.graphics_after.push(levels(
            ImageTransition::color(source, SRC, READ).stages(
                vk::PipelineStageFlags2::COPY,
                vk::AccessFlags2::NONE,
                SAMPLING_STAGES,
                vk::AccessFlags2::SHADER_SAMPLED_READ,
            ),
            source_count,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    fn img(n: u64) -> vk::Image {
        vk::Image::from_raw(n)
    }

    fn batch() -> Vec<BatchImage> {
        vec![
            // A grow: levels from staging and from the old image.
            BatchImage {
                new: (img(1), 10),
                uploads: true,
                source: (img(2), 8),
            },
            // A shrink: every level from the old image.
            BatchImage {
                new: (img(3), 5),
                uploads: false,
                source: (img(4), 7),
            },
        ]
    }

    fn find(list: &[ImageTransition], image: vk::Image) -> Vec<ImageTransition> {
        list.iter().copied().filter(|t| t.image == image).collect()
    }

    /// Every image ends sampled on the graphics queue, with all its levels, and
    /// the sources are never touched by the upload queue.
    fn ends_sampled(b: &UploadBarriers) {
        for (image, count) in [(1, 10), (3, 5), (2, 8), (4, 7)] {
            let after = find(&b.graphics_after, img(image));
            assert_eq!(after.len(), 1);
            assert_eq!(after[0].new, READ);
            assert_eq!(after[0].mips, (0, count));
            assert_eq!(after[0].dst_stage, SAMPLING_STAGES);
            assert_eq!(after[0].dst_access, vk::AccessFlags2::SHADER_SAMPLED_READ);
            assert!(!after[0].is_ownership_transfer());
        }
        for source in [2, 4] {
            assert!(find(&b.upload_before, img(source)).is_empty());
            assert!(find(&b.upload_release, img(source)).is_empty());
            let before = find(&b.graphics_before, img(source));
            assert_eq!((before[0].old, before[0].new), (READ, SRC));
        }
    }

    #[test]
    fn one_command_buffer_without_an_upload_queue() {
        let b = upload_barriers(None, &batch());
        assert!(!b.uses_upload_queue());
        assert!(b.upload_release.is_empty());
        for (image, count) in [(1, 10), (3, 5)] {
            let before = find(&b.graphics_before, img(image));
            assert_eq!(before.len(), 1);
            assert_eq!(
                (before[0].old, before[0].new),
                (vk::ImageLayout::UNDEFINED, DST)
            );
            assert_eq!(before[0].mips, (0, count));
        }
        assert!(b
            .graphics_before
            .iter()
            .chain(&b.graphics_after)
            .all(|t| t.families == (vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED)));
        ends_sampled(&b);
    }

    #[test]
    fn release_and_acquire_pairs_on_a_transfer_queue() {
        let f = UploadFamilies {
            graphics: 0,
            upload: 1,
        };
        let b = upload_barriers(Some(f), &batch());
        assert!(b.uses_upload_queue());
        // Only the image with uploads visits the upload queue.
        assert_eq!(b.upload_before.len(), 1);
        let first = b.upload_before[0];
        assert_eq!(first.image, img(1));
        assert_eq!((first.old, first.new), (vk::ImageLayout::UNDEFINED, DST));
        assert_eq!(first.mips, (0, 10));
        assert!(!first.is_ownership_transfer());
        // One release, one acquire, matching in image, levels, layouts and families.
        assert_eq!(b.upload_release.len(), 1);
        let release = b.upload_release[0];
        let acquire: Vec<_> = b
            .graphics_before
            .iter()
            .copied()
            .filter(ImageTransition::is_ownership_transfer)
            .collect();
        assert_eq!(acquire.len(), 1);
        let acquire = acquire[0];
        assert_eq!(release.image, acquire.image);
        assert_eq!(release.mips, acquire.mips);
        assert_eq!(release.mips, (0, 10));
        assert_eq!((release.old, release.new), (acquire.old, acquire.new));
        assert_eq!((release.old, release.new), (DST, DST));
        assert_eq!(release.families, (1, 0));
        assert_eq!(acquire.families, (1, 0));
        // The release makes the copies' writes available; its second half is ignored.
        assert_eq!(release.src_stage, vk::PipelineStageFlags2::COPY);
        assert_eq!(release.src_access, vk::AccessFlags2::TRANSFER_WRITE);
        assert_eq!(release.dst_stage, vk::PipelineStageFlags2::NONE);
        assert_eq!(release.dst_access, vk::AccessFlags2::NONE);
        // The acquire chains with the semaphore wait, and the copies wait for it.
        assert!(WAIT_STAGE.contains(acquire.src_stage) && !acquire.src_stage.is_empty());
        assert_eq!(acquire.src_access, vk::AccessFlags2::NONE);
        assert_eq!(acquire.dst_stage, vk::PipelineStageFlags2::COPY);
        assert!(acquire
            .dst_access
            .contains(vk::AccessFlags2::TRANSFER_WRITE));
        // The acquire comes before the graphics queue's other barriers of that image.
        let pos = |t: &ImageTransition| b.graphics_before.iter().position(|x| x.image == t.image);
        assert!(pos(&acquire) < b.graphics_before.iter().position(|x| x.image == img(2)));
        // The shrink stays on the graphics queue.
        let shrink = find(&b.graphics_before, img(3));
        assert_eq!(
            (shrink[0].old, shrink[0].new),
            (vk::ImageLayout::UNDEFINED, DST)
        );
        assert!(!shrink[0].is_ownership_transfer());
        ends_sampled(&b);
    }

    #[test]
    fn one_family_split_has_no_ownership_transfer() {
        let f = UploadFamilies {
            graphics: 0,
            upload: 0,
        };
        assert!(!f.transfers_ownership());
        let b = upload_barriers(Some(f), &batch());
        assert!(b.uses_upload_queue());
        assert!(b.upload_release.is_empty());
        assert!(b
            .upload_before
            .iter()
            .chain(&b.graphics_before)
            .chain(&b.graphics_after)
            .all(|t| !t.is_ownership_transfer()));
        // The uploaded image: a plain barrier from the upload's writes to the copies.
        let grown = find(&b.graphics_before, img(1));
        assert_eq!((grown[0].old, grown[0].new), (DST, DST));
        assert_eq!(grown[0].src_access, vk::AccessFlags2::TRANSFER_WRITE);
        ends_sampled(&b);
    }

    #[test]
    fn a_batch_of_shrinks_leaves_the_upload_queue_idle() {
        let f = UploadFamilies {
            graphics: 0,
            upload: 2,
        };
        let shrinks: Vec<_> = batch().into_iter().filter(|b| !b.uploads).collect();
        let b = upload_barriers(Some(f), &shrinks);
        assert!(!b.uses_upload_queue());
        assert!(b.upload_release.is_empty());
    }
}
