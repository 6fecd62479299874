//! Making a tile streamer: the sparse images (or the page atlases), their
//! mip tails bound and filled, the residency map and the staging ring; and
//! why a device, a format or a budget refuses ([`super::StartError`]).

use super::uploads::copy_region;
use super::*;
use crate::materials::textures::Texture;

/// Whether every format of `set` can be a sparse 2D image with one sample.
pub(super) fn formats_supported(ctx: &Context, set: &TextureSet) -> bool {
    set.textures.iter().all(|t| {
        // SAFETY: a plain query of this instance's physical device.
        let props = unsafe {
            ctx.instance
                .get_physical_device_sparse_image_format_properties(
                    ctx.physical_device,
                    t.format,
                    vk::ImageType::TYPE_2D,
                    vk::SampleCountFlags::TYPE_1,
                    vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST,
                    vk::ImageTiling::OPTIMAL,
                )
        };
        props
            .iter()
            .any(|p| p.aspect_mask.contains(vk::ImageAspectFlags::COLOR))
    })
}

/// The map's file mapped read-only for its tile reads, unless `pread`
/// (`--tune tiles.pread`) or the mapping fails (then read row by row).
pub(super) fn open_mapped(reader: &Reader, pread: bool) -> Option<mapped::MappedFile> {
    if pread {
        return None;
    }
    match mapped::MappedFile::open(reader) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("streaming: {e}; its tiles are read row by row");
            None
        }
    }
}

impl TileStreamer {
    /// Makes a sparse image for every texture of `set` (which holds the mip
    /// tails the level streamer would use; they stay as they are), binds and
    /// fills each image's mip tail, and points the descriptors at the sparse
    /// images. [`StartError::Refused`] when the device, a format or the
    /// budget can't (then stream by levels, or stop with it if tiles were
    /// asked for).
    /// Into a page atlas where `cfg` asks for [`ResidencyMode::Atlas`](crate::streaming::ResidencyMode::Atlas);
    /// `cfg.anisotropy` is the sampler's largest (0: off): it sets how far
    /// past a cell its samples may read ([`geometry::filter_margin`]).
    pub fn new(
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        cfg: &crate::streaming::StreamConfig,
    ) -> Result<Self, StartError> {
        let atlas = cfg.residency == crate::streaming::ResidencyMode::Atlas;
        let (upload_budget, budget, anisotropy) = (cfg.upload_budget, cfg.budget, cfg.anisotropy);
        refuse_unsupported(ctx, set, atlas)?;
        let (bound, one_shot, late_shot, gate) = make_sync(ctx)?;
        let mut s = Self {
            maps: Vec::new(),
            sparse: Vec::new(),
            memory: PageMemory {
                pool: set.texture_pool,
                page: 0,
                type_bits: u32::MAX,
            },
            residency: Residency::new(),
            residency_map: ResidencyMap {
                g: 1,
                changed: Vec::new(),
                footprints: policy::Footprints::new([], 1),
                words: Vec::new(),
                host: None,
                gpu: None,
                dirty: true,
            },
            uploads: Uploads {
                staging: None,
                slot: 0,
                max_loads: 0,
                one_shot,
                late_shot,
            },
            sync: BindSync {
                bound,
                signalled: false,
                gate,
            },
            schedule: Schedule::default(),
            knobs: Knobs::new(&cfg.tuning, atlas),
            atlas: None,
        };
        let built = if atlas {
            s.build_atlas(ctx, mem, set, upload_budget, budget, anisotropy)
        } else {
            s.build(ctx, mem, set, upload_budget, budget, anisotropy)
        };
        match built {
            Ok(()) => Ok(s),
            Err(e) => {
                ctx.wait_idle();
                s.destroy(ctx, mem, set);
                Err(e)
            }
        }
    }

    /// Makes a sparse image per map, binds and fills the always-resident
    /// pages (mip tails, and levels of one tile or less where the driver has
    /// no mip tail), then the cells, residency map and staging; points the
    /// descriptors at the sparse images.
    pub(super) fn build(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        upload_budget: u64,
        budget: u64,
        anisotropy: u32,
    ) -> Result<(), StartError> {
        let mut binds = TailBinds::default();
        for (t, reader) in open_readers(set) {
            let reader = reader?;
            let levels = reader.levels.len() as u32;
            let width = reader.width;
            let made = self.make_sparse_map(&ctx.device, t, reader)?;
            let map = MapTiles {
                size: width,
                levels,
                tile_w: made.granularity.width,
                tile_h: made.granularity.height,
                tail_first: made.driver_tail,
                margin: geometry::filter_margin(anisotropy),
            };
            self.bind_resident(mem, set, budget, &made, map, &mut binds)?;
        }
        if self.memory.type_bits == 0 {
            return Err(StartError::Refused(
                "the sparse images share no memory type with each other".into(),
            ));
        }
        // The mip tails: bound, then filled from the files.
        self.bind_tails(ctx, &binds)?;
        self.fill_tails(ctx, mem)?;

        self.build_maps_and_staging(ctx, mem, upload_budget, budget)?;
        for (i, s) in self.sparse.iter().enumerate() {
            set.write_view_in(&ctx.device, i, s.view, vk::ImageLayout::GENERAL);
        }
        Ok(())
    }

    /// One map's sparse image and its view, kept in [`Self::sparse`] (so
    /// that [`Self::destroy`] frees them whatever fails next); its colour
    /// sparse requirements checked, and the page size and the memory types
    /// narrowed to it.
    fn make_sparse_map(
        &mut self,
        d: &ash::Device,
        t: &Texture,
        reader: Reader,
    ) -> Result<MadeSparse, StartError> {
        let levels = reader.levels.len() as u32;
        let (image, view, reqs, sparse) = create_sparse_image(d, t.format, &reader)?;
        let mapped = open_mapped(&reader, self.knobs.pread);
        self.sparse.push(SparseMap {
            image,
            view,
            path: t.path.clone(),
            format: reader.format,
            reader,
            mapped,
        });
        let Some(sr) = sparse.iter().find(|r| {
            r.format_properties
                .aspect_mask
                .contains(vk::ImageAspectFlags::COLOR)
        }) else {
            return Err(StartError::Refused(format!(
                "{}: the driver gives no colour sparse memory requirements",
                t.path.display()
            )));
        };
        let gran = sr.format_properties.image_granularity;
        if gran.width == 0 || gran.height == 0 || reqs.alignment == 0 {
            return Err(StartError::Refused(format!(
                "{}: the driver gives a zero sparse granularity or alignment",
                t.path.display()
            )));
        }
        self.memory.page = self.memory.page.max(reqs.alignment);
        self.memory.type_bits &= reqs.memory_type_bits;
        Ok(MadeSparse {
            image,
            reqs,
            granularity: gran,
            driver_tail: sr.image_mip_tail_first_lod.min(levels),
            tail_offset: sr.image_mip_tail_offset,
            tail_size: sr.image_mip_tail_size,
        })
    }

    /// A map's always-resident pages allocated and their binds noted in
    /// `binds`: levels of one tile or less before the driver's mip tail
    /// (lavapipe has no mip tail: every level down to 1x1 is a tile of its
    /// own) join the always-resident tail, a page each; then the driver's
    /// mip tail. Adds the map's tiles.
    fn bind_resident(
        &mut self,
        mem: &GpuMemory,
        set: &TextureSet,
        budget: u64,
        made: &MadeSparse,
        mut map: MapTiles,
        binds: &mut TailBinds,
    ) -> Result<(), StartError> {
        let (image, reqs) = (made.image, made.reqs);
        let single = (0..made.driver_tail).find(|&l| map.grid(l) == (1, 1));
        if let Some(first) = single {
            for level in first..made.driver_tail {
                let page = match mem.allocate_memory(
                    reqs.alignment,
                    reqs.alignment,
                    reqs.memory_type_bits,
                    &MemOptions::new(MemoryUsage::GpuOnly, "sparse mip tail")
                        .in_pool(self.memory.pool),
                ) {
                    Ok(a) => a,
                    Err(e) if e.is_no_room() => {
                        return Err(StartError::Refused(self.too_small(set, budget)))
                    }
                    Err(e) => return Err(e.into()),
                };
                let side = map.side(level);
                binds.smalls.push((
                    image,
                    vk::SparseImageMemoryBind {
                        subresource: vk::ImageSubresource {
                            aspect_mask: vk::ImageAspectFlags::COLOR,
                            mip_level: level,
                            array_layer: 0,
                        },
                        offset: vk::Offset3D::default(),
                        extent: vk::Extent3D {
                            width: side,
                            height: side,
                            depth: 1,
                        },
                        memory: page.vk_memory(),
                        memory_offset: page.offset(),
                        flags: vk::SparseMemoryBindFlags::empty(),
                    },
                ));
                self.residency.tail_bytes += page.size();
                self.residency.tails.push(page);
            }
            map.tail_first = first;
        }
        self.push_tiles(map);
        if map.tail_first < map.levels && made.tail_size > 0 {
            let tail = match mem.allocate_memory(
                made.tail_size,
                reqs.alignment,
                reqs.memory_type_bits,
                &MemOptions::new(MemoryUsage::GpuOnly, "sparse mip tail").in_pool(self.memory.pool),
            ) {
                Ok(a) => a,
                Err(e) if e.is_no_room() => {
                    return Err(StartError::Refused(self.too_small(set, budget)))
                }
                Err(e) => return Err(e.into()),
            };
            self.residency.tail_bytes += tail.size();
            binds.tails.push((
                image,
                vk::SparseMemoryBind {
                    resource_offset: made.tail_offset,
                    size: made.tail_size,
                    memory: tail.vk_memory(),
                    memory_offset: tail.offset(),
                    flags: vk::SparseMemoryBindFlags::empty(),
                },
            ));
            self.residency.tails.push(tail);
        }
        Ok(())
    }

    /// Binds the always-resident pages of [`Self::bind_resident`] in one
    /// sparse bind (its signal waited for by [`Self::fill_tails`]).
    fn bind_tails(&mut self, ctx: &Context, tail: &TailBinds) -> Result<(), StartError> {
        let binds: Vec<[vk::SparseMemoryBind; 1]> = tail.tails.iter().map(|b| [b.1]).collect();
        let opaque: Vec<vk::SparseImageOpaqueMemoryBindInfo> = tail
            .tails
            .iter()
            .zip(&binds)
            .map(|(b, m)| {
                vk::SparseImageOpaqueMemoryBindInfo::default()
                    .image(b.0)
                    .binds(m)
            })
            .collect();
        let smalls: Vec<[vk::SparseImageMemoryBind; 1]> =
            tail.smalls.iter().map(|b| [b.1]).collect();
        let image_binds: Vec<vk::SparseImageMemoryBindInfo> = tail
            .smalls
            .iter()
            .zip(&smalls)
            .map(|(b, m)| vk::SparseImageMemoryBindInfo::default().image(b.0).binds(m))
            .collect();
        self.sync.bind_sparse(ctx, &opaque, &image_binds, None)?;
        Ok(())
    }

    /// Fills every map's tail levels from its file: read into one staging
    /// buffer, then copied into the sparse images (all moved to `GENERAL`)
    /// once their bind has signalled.
    fn fill_tails(&mut self, ctx: &Context, mem: &GpuMemory) -> Result<(), StartError> {
        let (tail_staging, tail_levels) = self.stage_tails(mem)?;
        let d = &ctx.device;
        let src = tail_staging.raw();
        let images: Vec<vk::Image> = self.sparse.iter().map(|s| s.image).collect();
        let maps = self.maps.clone();
        let after = self.sync.take_signal();
        let record = |cmd| {
            // SAFETY: recording; the images are live and their tails bound
            // (the submission waits for the bind).
            unsafe {
                let to_dst: Vec<vk::ImageMemoryBarrier2> = images
                    .iter()
                    .zip(&maps)
                    .map(|(&image, m)| {
                        vk::ImageMemoryBarrier2::default()
                            .src_stage_mask(vk::PipelineStageFlags2::NONE)
                            .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                            .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                            .old_layout(vk::ImageLayout::UNDEFINED)
                            .new_layout(vk::ImageLayout::GENERAL)
                            .image(image)
                            .subresource_range(color_levels(0, m.levels))
                    })
                    .collect();
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().image_memory_barriers(&to_dst),
                );
                for &(i, level, off, _) in &tail_levels {
                    let side = maps[i].side(level);
                    let region = [copy_region(off, (0, 0), level, (0, 0), (side, side))];
                    d.cmd_copy_buffer_to_image(
                        cmd,
                        src,
                        images[i],
                        vk::ImageLayout::GENERAL,
                        &region,
                    );
                }
                copies_to_shaders(d, cmd);
            }
        };
        // SAFETY: `after` is the tails' bind's signal, consumed here alone.
        let r = unsafe { self.uploads.one_shot.submit(ctx, after, record) }
            .and_then(|()| self.uploads.one_shot.wait(ctx));
        // SAFETY: the submission finished (or never started).
        unsafe { mem.destroy_buffer(tail_staging) };
        r?;
        Ok(())
    }

    /// Every map's tail levels (map, level, staging offset, bytes) read from
    /// its file into one staging buffer, flushed.
    fn stage_tails(&self, mem: &GpuMemory) -> Result<(MappedBuffer, Vec<TailLevel>), StartError> {
        let mut tail_levels = Vec::new();
        let mut tail_total = 0u64;
        for (i, (m, s)) in self.maps.iter().zip(&self.sparse).enumerate() {
            for level in m.tail_first..m.levels {
                let side = m.side(level);
                let bytes = s.format.level_bytes(side, side);
                tail_levels.push((i, level, tail_total, bytes));
                tail_total += bytes.next_multiple_of(16);
            }
        }
        let mut tail_staging = mem.create_buffer_mapped(
            &vk::BufferCreateInfo::default()
                .size(tail_total.max(16))
                .usage(vk::BufferUsageFlags::TRANSFER_SRC),
            &MemOptions::new(MemoryUsage::Upload, "sparse tail staging"),
        )?;
        let filled = (|| {
            let out = tail_staging.mapped_mut().as_mut_slice();
            for &(i, level, off, bytes) in &tail_levels {
                self.sparse[i]
                    .reader
                    .read_level_into(
                        level as usize,
                        &mut out[off as usize..(off + bytes) as usize],
                    )
                    .map_err(|e| GpuError::Other(e.to_string()))?;
            }
            Ok::<(), GpuError>(())
        })();
        if let Err(e) = filled {
            // SAFETY: never used by the GPU.
            unsafe { mem.destroy_buffer(tail_staging) };
            return Err(e.into());
        }
        mem.flush(tail_staging.allocation());
        Ok((tail_staging, tail_levels))
    }

    /// A map's tile layout and its empty per-tile state.
    pub(super) fn push_tiles(&mut self, map: MapTiles) {
        self.maps.push(map);
        self.residency.add_map(map.tile_count());
    }

    /// [`Self::build`] for a page atlas ([`atlas`]): the texture set's own
    /// images keep the tails (levels of at most [`atlas::tail_texels`] a
    /// side, loaded already) and stay in the descriptors; finer levels are
    /// tiles of [`atlas::tile_side`]. One atlas image per map format, all
    /// with the same slots, takes what the texture pool's budget has left;
    /// their views and the level probe go after the textures in the
    /// bindless array, and the page table in the residency map's buffer.
    pub(super) fn build_atlas(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        set: &TextureSet,
        upload_budget: u64,
        budget: u64,
        anisotropy: u32,
    ) -> Result<(), StartError> {
        let d = &ctx.device;
        let readers: Vec<Reader> = open_readers(set)
            .map(|(_, r)| r)
            .collect::<Result<_, _>>()?;
        let tile = atlas::tile_side(readers.iter().map(|r| r.format));
        let (formats, of_map) = self.add_atlas_maps(set, readers, tile, anisotropy)?;
        let n = set.textures.len() as u32;
        let slots = self.atlas_slots(mem, budget, &formats, &of_map, tile);
        let Some((layout, images)) = self.fit_atlases(ctx, mem, &formats, tile, slots.want)? else {
            return Err(StartError::Refused(format!(
                "--texture-budget {budget} B leaves no room for a page atlas after the {} maps' \
                 tails ({} B): a slot of every format takes {} B; raise \
                 --texture-budget or use --residency levels",
                set.textures.len(),
                set.allocated_bytes(),
                slots.per_slot
            )));
        };
        let bytes = images.iter().map(|(i, _)| i.allocation().size()).sum();
        let probe = crate::materials::textures::create_level_probe(ctx, mem);
        let probe = match probe {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `make_atlases` waited for its one submission; no
                // descriptor names them yet.
                unsafe { Self::free_atlases(ctx, mem, images) };
                return Err(e.into());
            }
        };
        for (k, (_, view)) in images.iter().enumerate() {
            set.write_view_in(d, n as usize + k, *view, vk::ImageLayout::GENERAL);
        }
        let probe_element = n + formats.len() as u32;
        set.write_view(d, probe_element as usize, probe.1);
        let (table, bases) = self.atlas_page_table(probe_element, n, tile, &of_map, &layout);
        self.memory.page = slots.slot_bytes.iter().copied().max().unwrap_or(0);
        let tile_counts: Vec<usize> = self.maps.iter().map(MapTiles::tile_count).collect();
        self.atlas = Some(AtlasState {
            layout,
            images,
            slots: atlas::SlotTable::new(
                of_map,
                &tile_counts,
                layout.slots(),
                slots.slot_bytes,
                table,
                bases,
            ),
            bytes,
            set_tail_bytes: set.allocated_bytes(),
            probe: Some(probe),
        });
        self.build_maps_and_staging(ctx, mem, upload_budget, budget)?;
        Ok(())
    }

    /// The atlas's maps: each square, its streamed levels whole blocks and
    /// at least twice the border, tiles of `tile`; kept in [`Self::sparse`]
    /// with the texture set's own views. The formats met (the map format and
    /// its Vulkan format), and each map's index into them; refused when the
    /// bindless array has no room for an atlas per format.
    fn add_atlas_maps(
        &mut self,
        set: &TextureSet,
        readers: Vec<Reader>,
        tile: u32,
        anisotropy: u32,
    ) -> Result<(MapFormats, Vec<usize>), StartError> {
        let border = atlas::BORDER_TEXELS;
        let mut formats: Vec<(Format, vk::Format)> = Vec::new();
        let mut of_map = Vec::new();
        for (t, reader) in set.textures.iter().zip(readers) {
            let levels = reader.levels.len() as u32;
            if reader.width != reader.height {
                return Err(StartError::Refused(format!(
                    "{}: the page atlas takes square maps ({} x {})",
                    t.path.display(),
                    reader.width,
                    reader.height
                )));
            }
            let map = MapTiles {
                size: reader.width,
                levels,
                tile_w: tile,
                tile_h: tile,
                tail_first: t.base_level.min(levels),
                margin: geometry::filter_margin(anisotropy),
            };
            let bs = reader.format.block_side();
            if (0..map.tail_first)
                .any(|l| !map.side(l).is_multiple_of(bs) || map.side(l) < 2 * border)
            {
                return Err(StartError::Refused(format!(
                    "{}: a streamed level is not whole {bs}x{bs} blocks or narrower than its \
                     border; the page atlas needs levels of whole blocks",
                    t.path.display()
                )));
            }
            let k = match formats.iter().position(|f| f.0 == reader.format) {
                Some(k) => k,
                None => {
                    formats.push((reader.format, t.format));
                    formats.len() - 1
                }
            };
            of_map.push(k);
            let mapped = open_mapped(&reader, self.knobs.pread);
            self.sparse.push(SparseMap {
                image: vk::Image::null(),
                view: t.view,
                path: t.path.clone(),
                format: reader.format,
                reader,
                mapped,
            });
            self.push_tiles(map);
        }
        if formats.len() + 1 > crate::materials::textures::ATLAS_ELEMENTS as usize {
            return Err(StartError::Refused(format!(
                "{} map formats: the bindless array has room for {} atlases",
                formats.len(),
                crate::materials::textures::ATLAS_ELEMENTS - 1
            )));
        }
        Ok((formats, of_map))
    }

    /// Slots: as many in each atlas as the pool's budget left takes (a
    /// 256th kept for the images' alignment), at most every tile of its
    /// maps. (Maps of no streamed level, all tail, still get a slot: the
    /// atlas exists, its page table empty.)
    fn atlas_slots(
        &self,
        mem: &GpuMemory,
        budget: u64,
        formats: &[(Format, vk::Format)],
        of_map: &[usize],
        tile: u32,
    ) -> AtlasSlots {
        let side = tile + 2 * atlas::BORDER_TEXELS;
        let slot_bytes: Vec<u64> = formats
            .iter()
            .map(|f| f.0.level_bytes(side, side))
            .collect();
        let free = mem.pool_pressure(self.memory.pool).map_or(budget, |p| {
            p.pool_budget
                .unwrap_or(budget)
                .saturating_sub(p.pool_allocated_bytes)
        });
        let per_slot: u64 = slot_bytes.iter().sum::<u64>().max(1);
        let most_tiles = (0..formats.len())
            .map(|k| {
                (0..self.maps.len())
                    .filter(|&i| of_map[i] == k)
                    .map(|i| self.maps[i].tile_count() as u64)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let want = (free - free / 256) / per_slot;
        AtlasSlots {
            slot_bytes,
            per_slot,
            want: want.min(most_tiles.max(1)),
        }
    }

    /// The atlas images of [`Self::atlas_slots`]' `want` slots, at most what
    /// the image size limit holds, a fiftieth fewer each time the pool
    /// refuses (alignment, its blocks' granularity); `None` when no layout
    /// fits.
    fn fit_atlases(
        &self,
        ctx: &Context,
        mem: &GpuMemory,
        formats: &[(Format, vk::Format)],
        tile: u32,
        mut want: u64,
    ) -> Result<Option<(atlas::AtlasLayout, AtlasImages)>, StartError> {
        // SAFETY: a plain query of this instance's physical device.
        let limits = unsafe {
            ctx.instance
                .get_physical_device_properties(ctx.physical_device)
        }
        .limits;
        for _attempt in 0..24 {
            let Some(l) = atlas::AtlasLayout::fit(
                tile,
                atlas::BORDER_TEXELS,
                want,
                limits.max_image_dimension2_d,
            ) else {
                break;
            };
            match self.make_atlases(ctx, mem, formats, &l) {
                Ok(Some(made)) => return Ok(Some((l, made))),
                // The pool refused (alignment, its blocks' granularity): a
                // fiftieth fewer.
                Ok(None) => want = u64::from(l.slots()) * 49 / 50,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// The page table of the atlas's maps (a header, an entry per map, then
    /// a word per tile, every tile absent) and where each map's tiles begin
    /// in it.
    fn atlas_page_table(
        &self,
        probe_element: u32,
        n: u32,
        tile: u32,
        of_map: &[usize],
        layout: &atlas::AtlasLayout,
    ) -> (Vec<u32>, Vec<usize>) {
        let mut entries = Vec::new();
        let mut bases = Vec::new();
        let mut total = atlas::HEADER_WORDS + self.maps.len() * atlas::MAP_WORDS;
        for (i, m) in self.maps.iter().enumerate() {
            bases.push(total);
            entries.push(atlas::MapEntry {
                base: total as u32,
                size: m.size,
                tail_first: m.tail_first,
                tile,
                border: atlas::BORDER_TEXELS,
                atlas_element: n + of_map[i] as u32,
                per_row: layout.per_row,
            });
            total += m.tile_count();
        }
        let table = atlas::page_table(
            probe_element,
            &entries,
            total - atlas::HEADER_WORDS - self.maps.len() * atlas::MAP_WORDS,
        );
        (table, bases)
    }

    /// One atlas image of `layout` per format, in the texture pool, each in
    /// `GENERAL` (copies and sampling use it, as the sparse images do), with
    /// its view: `None` when the pool refuses one (the others freed).
    pub(super) fn make_atlases(
        &self,
        ctx: &Context,
        mem: &GpuMemory,
        formats: &[(Format, vk::Format)],
        layout: &atlas::AtlasLayout,
    ) -> Result<Option<Vec<(Image, vk::ImageView)>>, GpuError> {
        let d = &ctx.device;
        let (w, h) = layout.extent();
        let mut made: Vec<(Image, vk::ImageView)> = Vec::new();
        for &(_, format) in formats {
            let info = vk::ImageCreateInfo::default()
                .image_type(vk::ImageType::TYPE_2D)
                .format(format)
                .extent(vk::Extent3D {
                    width: w,
                    height: h,
                    depth: 1,
                })
                .mip_levels(1)
                .array_layers(1)
                .samples(vk::SampleCountFlags::TYPE_1)
                .tiling(vk::ImageTiling::OPTIMAL)
                .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
                .sharing_mode(vk::SharingMode::EXCLUSIVE)
                .initial_layout(vk::ImageLayout::UNDEFINED);
            let opts = MemOptions::new(MemoryUsage::GpuOnly, "page atlas")
                .in_pool(self.memory.pool)
                .full_is_expected();
            let image = match mem.create_image(&info, &opts) {
                Ok(i) => i,
                Err(e) if e.is_no_room() => {
                    // SAFETY: never used by the GPU, named by no descriptor.
                    unsafe { Self::free_atlases(ctx, mem, made) };
                    return Ok(None);
                }
                Err(e) => {
                    // SAFETY: as above.
                    unsafe { Self::free_atlases(ctx, mem, made) };
                    return Err(e);
                }
            };
            // SAFETY: the image is live and bound, with one level.
            match unsafe { crate::gpu::util::texture_view(d, image.raw(), format, 1) } {
                Ok(v) => made.push((image, v)),
                Err(e) => {
                    // SAFETY: never used by the GPU, named by no descriptor.
                    unsafe {
                        mem.destroy_image(image);
                        Self::free_atlases(ctx, mem, made);
                    }
                    return Err(e);
                }
            }
        }
        let raws: Vec<vk::Image> = made.iter().map(|(i, _)| i.raw()).collect();
        let r = self.uploads.one_shot.run(ctx, |cmd| {
            let to_general: Vec<vk::ImageMemoryBarrier2> = raws
                .iter()
                .map(|&image| {
                    vk::ImageMemoryBarrier2::default()
                        .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                        .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                        .old_layout(vk::ImageLayout::UNDEFINED)
                        .new_layout(vk::ImageLayout::GENERAL)
                        .image(image)
                        .subresource_range(color_levels(0, 1))
                })
                .collect();
            // SAFETY: recording; the images are live, bound and unused.
            unsafe {
                d.cmd_pipeline_barrier2(
                    cmd,
                    &vk::DependencyInfo::default().image_memory_barriers(&to_general),
                );
            }
        });
        if let Err(e) = r {
            // SAFETY: the one-shot was waited for, or its submission or wait
            // failed (the device lost); no descriptor names them.
            unsafe { Self::free_atlases(ctx, mem, made) };
            return Err(e);
        }
        Ok(Some(made))
    }

    /// Destroys atlas images and their views.
    ///
    /// # Safety
    /// No pending GPU work uses them, and no descriptor the GPU will read
    /// names them.
    pub(super) unsafe fn free_atlases(
        ctx: &Context,
        mem: &GpuMemory,
        images: Vec<(Image, vk::ImageView)>,
    ) {
        for (image, view) in images {
            // SAFETY: the contract above.
            unsafe {
                ctx.device.destroy_image_view(view, None);
                mem.destroy_image(image);
            }
        }
    }

    /// The cells, the residency map (with a page atlas, the page table in its
    /// buffer) and the staging of [`Self::build`] and [`Self::build_atlas`],
    /// once the maps are known; uploads the map.
    pub(super) fn build_maps_and_staging(
        &mut self,
        ctx: &Context,
        mem: &GpuMemory,
        upload_budget: u64,
        budget: u64,
    ) -> Result<(), GpuError> {
        // Cells, residency maps, staging.
        self.residency_map.g = geometry::cells_per_side(&self.maps, MAX_CELLS);
        self.residency_map.footprints = policy::Footprints::new(&self.maps, self.residency_map.g);
        let materials = self.maps.len() / policy::MAPS_PER_MATERIAL;
        let cells = (self.residency_map.g * self.residency_map.g) as usize;
        self.residency_map.words = vec![0; materials * cells];
        self.residency_map
            .refresh(&self.maps, &self.residency.resident);
        let words = self
            .residency_map
            .words
            .len()
            .max(self.atlas.as_ref().map_or(0, |a| a.slots.table().len()));
        let map_bytes = (words.max(4) * 4) as u64;
        self.residency_map.host = Some(
            mem.create_buffer_mapped(
                &vk::BufferCreateInfo::default()
                    .size(map_bytes)
                    .usage(vk::BufferUsageFlags::TRANSFER_SRC),
                &MemOptions::new(MemoryUsage::Upload, "tile residency map staging"),
            )?,
        );
        self.residency_map.gpu =
            Some(mem.create_buffer(
                &vk::BufferCreateInfo::default().size(map_bytes).usage(
                    vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_DST,
                ),
                &MemOptions::new(MemoryUsage::GpuOnly, "tile residency map"),
            )?);
        self.uploads.slot = self
            .maps
            .iter()
            .zip(&self.sparse)
            .map(|(m, s)| match self.atlas.as_ref() {
                Some(a) => s.format.level_bytes(a.layout.side(), a.layout.side()),
                None => s.format.level_bytes(m.tile_w, m.tile_h),
            })
            .max()
            .unwrap_or(0)
            .next_multiple_of(256)
            .max(256);
        let staging = upload_budget.min(budget).max(self.uploads.slot);
        self.uploads.max_loads = (staging / self.uploads.slot).clamp(1, 1 << 16) as usize;
        self.uploads.staging = Some(
            mem.create_buffer_mapped(
                &vk::BufferCreateInfo::default()
                    .size(self.uploads.max_loads as u64 * self.uploads.slot)
                    .usage(vk::BufferUsageFlags::TRANSFER_SRC),
                &MemOptions::new(MemoryUsage::Upload, "tile staging"),
            )?,
        );
        self.upload(ctx, mem, &[], &[], 0, false)
    }

    /// Why the budget can't take the always-resident pages (mip tails, and
    /// levels of one tile or less where the driver has no mip tail).
    pub(super) fn too_small(&self, set: &TextureSet, budget: u64) -> String {
        format!(
            "--texture-budget {budget} B is too small for streaming by tiles: the {} maps' \
             always-resident pages (mip tails, and levels of one tile or less where the driver \
             has no mip tail: {} pages of {} KiB bound so far) and the textures' own tails \
             ({} B) do not fit; raise --texture-budget or use --residency levels",
            set.textures.len(),
            self.residency.tails.len(),
            self.memory.page.max(1) >> 10,
            set.allocated_bytes()
        )
    }
}

/// Every texture of `set` with its file opened for its header and tile reads,
/// each as the iteration reaches it: what both [`TileStreamer::build`] and
/// [`TileStreamer::build_atlas`] begin with.
fn open_readers(
    set: &TextureSet,
) -> impl Iterator<Item = (&Texture, Result<Reader, StartError>)> + '_ {
    set.textures.iter().map(|t| {
        let reader =
            Reader::open(&t.path).map_err(|e| StartError::from(GpuError::Other(e.to_string())));
        (t, reader)
    })
}

/// A map's tail level for [`TileStreamer::stage_tails`]: the map, the
/// level, its offset in the staging buffer and its bytes.
type TailLevel = (usize, u32, u64, u64);

/// What [`TileStreamer::make_sparse_map`] made and found for a map's sparse
/// image.
struct MadeSparse {
    image: vk::Image,
    reqs: vk::MemoryRequirements,
    /// The colour aspect's sparse block, a tile.
    granularity: vk::Extent3D,
    /// The driver's first mip tail level (at most the level count).
    driver_tail: u32,
    /// Where the driver's mip tail lies in the image, and its bytes.
    tail_offset: vk::DeviceSize,
    tail_size: vk::DeviceSize,
}

/// The always-resident binds of [`TileStreamer::build`]: the driver's mip
/// tails (opaque) and levels of one tile or less (image binds), per image.
#[derive(Default)]
struct TailBinds {
    tails: Vec<(vk::Image, vk::SparseMemoryBind)>,
    smalls: Vec<(vk::Image, vk::SparseImageMemoryBind)>,
}

/// A sparse 2D image of `reader`'s size and levels, its view (every level)
/// and its memory and sparse requirements.
fn create_sparse_image(
    d: &ash::Device,
    format: vk::Format,
    reader: &Reader,
) -> Result<
    (
        vk::Image,
        vk::ImageView,
        vk::MemoryRequirements,
        Vec<vk::SparseImageMemoryRequirements>,
    ),
    StartError,
> {
    let levels = reader.levels.len() as u32;
    let (width, height) = (reader.width, reader.height);
    let info = vk::ImageCreateInfo::default()
        .flags(vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY)
        .image_type(vk::ImageType::TYPE_2D)
        .format(format)
        .extent(vk::Extent3D {
            width,
            height,
            depth: 1,
        })
        .mip_levels(levels)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    // SAFETY: a valid create info (the format supports sparse residency).
    let image = unsafe { d.create_image(&info, None) }.check("vkCreateImage")?;
    // SAFETY: the image is live.
    let (reqs, sparse) = unsafe {
        (
            d.get_image_memory_requirements(image),
            d.get_image_sparse_memory_requirements(image),
        )
    };
    // SAFETY: the image is live, of `format` and `levels` levels.
    let r = unsafe { sparse_view(d, image, format, levels) };
    match r {
        Ok(view) => Ok((image, view, reqs, sparse)),
        Err(e) => {
            // SAFETY: unused, unbound.
            unsafe { d.destroy_image(image, None) };
            Err(GpuError::Vk {
                call: "vkCreateImageView",
                result: e,
            }
            .into())
        }
    }
}

/// A 2D view of every level of `image`.
///
/// # Safety
/// `image` is live, a 2D image of `format` with `levels` levels.
unsafe fn sparse_view(
    d: &ash::Device,
    image: vk::Image,
    format: vk::Format,
    levels: u32,
) -> ash::prelude::VkResult<vk::ImageView> {
    // SAFETY: the image is live; every level, one layer.
    unsafe {
        d.create_image_view(
            &vk::ImageViewCreateInfo::default()
                .image(image)
                .view_type(vk::ImageViewType::TYPE_2D)
                .format(format)
                .subresource_range(vk::ImageSubresourceRange {
                    aspect_mask: vk::ImageAspectFlags::COLOR,
                    base_mip_level: 0,
                    level_count: levels,
                    base_array_layer: 0,
                    layer_count: 1,
                }),
            None,
        )
    }
}

/// The atlas slots [`TileStreamer::atlas_slots`] asks for.
struct AtlasSlots {
    /// Per format: a slot's bytes (a tile and its border).
    slot_bytes: Vec<u64>,
    /// A slot of every format, in bytes (at least 1).
    per_slot: u64,
    /// Slots per atlas.
    want: u64,
}

/// Why the device or the texture set can't take the asked residency: the
/// page atlas needs a bindless texture array, sparse tiles need sparse
/// residency for every texture format.
fn refuse_unsupported(ctx: &Context, set: &TextureSet, atlas: bool) -> Result<(), StartError> {
    if atlas && (!ctx.info.bindless || set.textures.is_empty()) {
        return Err(StartError::Refused(format!(
            "{} has no bindless texture array with non-uniform indexing, which the page \
             atlas's sampling needs; use --residency tiles or levels",
            ctx.info.name
        )));
    }
    if !atlas && (!ctx.info.sparse_tiles || set.textures.is_empty() || !formats_supported(ctx, set))
    {
        return Err(StartError::Refused(format!(
            "{} has no sparse residency for these textures (sparseBinding, \
             sparseResidencyImage2D, a graphics queue with sparse binding, and sparse \
             support for every texture format); use --residency levels or auto",
            ctx.info.name
        )));
    }
    Ok(())
}

/// The streamer's synchronisation: the sparse binds' semaphore, the
/// one-shot and the late one-shot, and the gate semaphore (each freed
/// again when a later one fails).
fn make_sync(
    ctx: &Context,
) -> Result<(vk::Semaphore, OneShot, OneShot, vk::Semaphore), StartError> {
    let d = &ctx.device;
    // SAFETY: valid create info on a live device.
    let bound = unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }
        .check("vkCreateSemaphore")?;
    let one_shot = match OneShot::new(ctx) {
        Ok(o) => o,
        Err(e) => {
            // SAFETY: the semaphore was never used.
            unsafe { d.destroy_semaphore(bound, None) };
            return Err(e.into());
        }
    };
    let late_shot = match OneShot::new(ctx) {
        Ok(o) => o,
        Err(e) => {
            one_shot.destroy(d);
            // SAFETY: the semaphore was never used.
            unsafe { d.destroy_semaphore(bound, None) };
            return Err(e.into());
        }
    };
    // SAFETY: valid create info on a live device.
    let gate = match unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }
        .check("vkCreateSemaphore")
    {
        Ok(g) => g,
        Err(e) => {
            late_shot.destroy(d);
            one_shot.destroy(d);
            // SAFETY: the semaphore was never used.
            unsafe { d.destroy_semaphore(bound, None) };
            return Err(e.into());
        }
    };
    Ok((bound, one_shot, late_shot, gate))
}

/// The page atlas's map formats: each map format met and its Vulkan format.
type MapFormats = Vec<(Format, vk::Format)>;

/// Atlas images and their views.
type AtlasImages = Vec<(Image, vk::ImageView)>;
