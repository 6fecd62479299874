//! Writes a contact sheet of every material's maps as a PPM (albedo row, normal
//! row, ORM row per material): `cargo run -p material-baker --example contact_sheet -- OUT.ppm [SIZE]`.

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "contact.ppm".into());
    let size: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(128);
    let n = size as usize;
    let mats = material_baker::ALL;
    let (w, h) = (n * 3, n * mats.len());
    let mut img = vec![0u8; w * h * 3];
    let t = std::time::Instant::now();
    for (mi, &m) in mats.iter().enumerate() {
        let chains = material_baker::bake(m, size, 1, &|_| {});
        for (ci, c) in chains.iter().enumerate() {
            let bpp = c.format.block_bytes() as usize;
            for y in 0..n {
                for x in 0..n {
                    let p = &c.levels[0][(y * n + x) * bpp..][..bpp];
                    let rgb = if bpp == 2 {
                        [p[0], p[1], 255]
                    } else {
                        [p[0], p[1], p[2]]
                    };
                    let o = ((mi * n + y) * w + ci * n + x) * 3;
                    img[o..o + 3].copy_from_slice(&rgb);
                }
            }
        }
    }
    eprintln!(
        "baked {} materials at {size} in {:.2} s",
        mats.len(),
        t.elapsed().as_secs_f64()
    );
    let mut data = format!("P6 {w} {h} 255\n").into_bytes();
    data.extend_from_slice(&img);
    std::fs::write(&out, data).unwrap();
}
