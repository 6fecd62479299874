//! Heap maps without a GPU: the overlay's panels laid out by egui, tessellated
//! by egui, and filled here by a small triangle rasterizer into an image.

use std::collections::HashMap;

use egui::epaint::{ImageDelta, Primitive};
use egui::{Color32, ImageData, TextureId, Ui};
use image::RgbaImage;

/// The tallest heap map, in pixels (longer content is cut).
pub const MAX_HEIGHT: u32 = 16384;

/// The most pixels an image may have (width x height; 32 Mpx: a 512 MiB
/// float canvas and a 128 MiB image): at the widest width the height is cut
/// at `MAX_PIXELS / width` instead of [`MAX_HEIGHT`], so a dump of thousands
/// of blocks drawn 16384 pixels wide can't ask for gigabytes.
pub const MAX_PIXELS: u32 = 1 << 25;

struct Texture {
    width: usize,
    height: usize,
    pixels: Vec<Color32>,
}

impl Texture {
    fn apply(textures: &mut HashMap<TextureId, Texture>, id: TextureId, delta: &ImageDelta) {
        let ImageData::Color(image) = &delta.image;
        let [w, h] = image.size;
        match delta.pos {
            None => {
                textures.insert(
                    id,
                    Texture {
                        width: w,
                        height: h,
                        pixels: image.pixels.clone(),
                    },
                );
            }
            Some([x0, y0]) => {
                if let Some(t) = textures.get_mut(&id) {
                    for y in 0..h {
                        for x in 0..w {
                            let (tx, ty) = (x0 + x, y0 + y);
                            if tx < t.width && ty < t.height {
                                t.pixels[ty * t.width + tx] = image.pixels[y * w + x];
                            }
                        }
                    }
                }
            }
        }
    }

    /// Bilinear sample at normalized `uv`, as premultiplied RGBA in 0..=1.
    fn sample(&self, u: f32, v: f32) -> [f32; 4] {
        if self.width == 0 || self.height == 0 {
            return [1.0; 4];
        }
        let x = (u * self.width as f32 - 0.5).clamp(0.0, (self.width - 1) as f32);
        let y = (v * self.height as f32 - 0.5).clamp(0.0, (self.height - 1) as f32);
        let (x0, y0) = (x.floor() as usize, y.floor() as usize);
        let (x1, y1) = ((x0 + 1).min(self.width - 1), (y0 + 1).min(self.height - 1));
        let (fx, fy) = (x - x0 as f32, y - y0 as f32);
        let px = |x: usize, y: usize| self.pixels[y * self.width + x].to_array();
        let (a, b, c, d) = (px(x0, y0), px(x1, y0), px(x0, y1), px(x1, y1));
        let mut out = [0.0; 4];
        for i in 0..4 {
            let top = a[i] as f32 * (1.0 - fx) + b[i] as f32 * fx;
            let bottom = c[i] as f32 * (1.0 - fx) + d[i] as f32 * fx;
            out[i] = (top * (1.0 - fy) + bottom * fy) / 255.0;
        }
        out
    }
}

/// Sets `input`'s screen to `width` x `height` pixels at `pixels_per_point`
/// (the screen rectangle in points and the root viewport's native scale):
/// what a program that draws the panels into its own target tells egui.
pub fn fit_input(input: &mut egui::RawInput, width: f32, height: f32, pixels_per_point: f32) {
    input.screen_rect = Some(egui::Rect::from_min_size(
        egui::Pos2::ZERO,
        egui::vec2(width / pixels_per_point, height / pixels_per_point),
    ));
    input
        .viewports
        .entry(egui::ViewportId::ROOT)
        .or_default()
        .native_pixels_per_point = Some(pixels_per_point);
}

/// Lays out `draw` with egui at `width` pixels and `pixels_per_point`, and
/// rasterizes it; the image is as tall as the content.
pub fn render_ui(width: u32, pixels_per_point: f32, mut draw: impl FnMut(&mut Ui)) -> RgbaImage {
    let ctx = egui::Context::default();
    ctx.set_visuals(egui::Visuals::dark());
    let ppp = pixels_per_point.max(0.25);
    let width = width.clamp(64, 16384);
    let mut input = egui::RawInput {
        max_texture_side: Some(8192),
        ..Default::default()
    };
    fit_input(&mut input, width as f32, MAX_HEIGHT as f32, ppp);
    let mut bottom = 0.0f32;
    let background = egui::Visuals::dark().panel_fill;
    let mut output = ctx.run_ui(input, |ui| {
        let r = egui::Frame::central_panel(ui.style()).show(ui, |ui| draw(ui));
        bottom = r.response.rect.max.y;
    });
    let mut textures = HashMap::new();
    // Whole textures first, then partial updates (a hash map has no order).
    let mut deltas: Vec<_> = output.textures_delta.set.drain().collect();
    deltas.sort_by_key(|(_, d)| !d.iter().any(|d| d.pos.is_none()));
    for (id, deltas) in &deltas {
        for delta in deltas {
            Texture::apply(&mut textures, *id, delta);
        }
    }
    output.textures_delta.clear();
    let ppp = output.pixels_per_point;
    let primitives = ctx.tessellate(output.shapes, ppp);
    let height = ((bottom * ppp).ceil() as u32).clamp(1, MAX_HEIGHT.min(MAX_PIXELS / width));
    let mut canvas =
        vec![background.to_array().map(|c| c as f32 / 255.0); (width * height) as usize];
    for p in &primitives {
        let Primitive::Mesh(mesh) = &p.primitive else {
            continue;
        };
        let Some(tex) = textures.get(&mesh.texture_id) else {
            continue;
        };
        let clip = p.clip_rect;
        let clip = [
            (clip.min.x * ppp).max(0.0),
            (clip.min.y * ppp).max(0.0),
            (clip.max.x * ppp).min(width as f32),
            (clip.max.y * ppp).min(height as f32),
        ];
        for tri in mesh.indices.chunks_exact(3) {
            let v = [
                &mesh.vertices[tri[0] as usize],
                &mesh.vertices[tri[1] as usize],
                &mesh.vertices[tri[2] as usize],
            ];
            fill_triangle(&mut canvas, width, v, ppp, clip, tex);
        }
    }
    let mut img = RgbaImage::new(width, height);
    for (dst, src) in img.pixels_mut().zip(&canvas) {
        dst.0 = src.map(|c| (c.clamp(0.0, 1.0) * 255.0 + 0.5) as u8);
    }
    img
}

fn fill_triangle(
    canvas: &mut [[f32; 4]],
    width: u32,
    v: [&egui::epaint::Vertex; 3],
    ppp: f32,
    clip: [f32; 4],
    tex: &Texture,
) {
    let p = v.map(|v| (v.pos.x * ppp, v.pos.y * ppp));
    let area = (p[1].0 - p[0].0) * (p[2].1 - p[0].1) - (p[2].0 - p[0].0) * (p[1].1 - p[0].1);
    if area.abs() < 1e-8 {
        return;
    }
    let min_x = p.iter().map(|q| q.0).fold(f32::MAX, f32::min).max(clip[0]);
    let max_x = p.iter().map(|q| q.0).fold(f32::MIN, f32::max).min(clip[2]);
    let min_y = p.iter().map(|q| q.1).fold(f32::MAX, f32::min).max(clip[1]);
    let max_y = p.iter().map(|q| q.1).fold(f32::MIN, f32::max).min(clip[3]);
    if min_x >= max_x || min_y >= max_y {
        return;
    }
    let colors = v.map(|v| v.color.to_array().map(|c| c as f32 / 255.0));
    for y in (min_y.floor() as u32)..(max_y.ceil() as u32) {
        let cy = y as f32 + 0.5;
        if cy < clip[1] || cy >= clip[3] {
            continue;
        }
        for x in (min_x.floor() as u32)..(max_x.ceil() as u32) {
            let cx = x as f32 + 0.5;
            if cx < clip[0] || cx >= clip[2] {
                continue;
            }
            let edge =
                |a: (f32, f32), b: (f32, f32)| (b.0 - a.0) * (cy - a.1) - (b.1 - a.1) * (cx - a.0);
            let w0 = edge(p[1], p[2]) / area;
            let w1 = edge(p[2], p[0]) / area;
            let w2 = edge(p[0], p[1]) / area;
            // Half-open on one side so shared edges are filled once.
            if w0 < 0.0 || w1 < 0.0 || w2 < 0.0 || (w0 == 0.0 && w1 == 0.0) {
                continue;
            }
            let u = w0 * v[0].uv.x + w1 * v[1].uv.x + w2 * v[2].uv.x;
            let vv = w0 * v[0].uv.y + w1 * v[1].uv.y + w2 * v[2].uv.y;
            let t = tex.sample(u, vv);
            let mut src = [0.0f32; 4];
            for (i, s) in src.iter_mut().enumerate() {
                *s = (w0 * colors[0][i] + w1 * colors[1][i] + w2 * colors[2][i]) * t[i];
            }
            let dst = &mut canvas[(y * width + x) as usize];
            for i in 0..4 {
                dst[i] = src[i] + dst[i] * (1.0 - src[3]);
            }
        }
    }
}
