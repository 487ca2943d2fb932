//! The CubeCL kernels are one source in two copies, one per Burn line (ARCHITECTURE.md,
//! "What stays in the 0.21 front-end"): this line's `src/cube/kernel.rs` must equal the
//! 0.21 line's `burn-0.21/src/cube/kernel.rs` once comments are set aside and the known
//! differences between cubecl 0.10 and 0.11 are undone. A fix made in one copy and not the
//! other fails here.

/// The code of a kernel file: comment lines dropped, lines trimmed.
fn code(source: &str) -> Vec<String> {
    source
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .map(String::from)
        .collect()
}

/// The 0.22 copy's lines where cubecl 0.11 differs, as the 0.21 copy writes them.
const CUBECL_0_11: [(&str, &str); 4] = [
    // cubecl 0.11 makes an unchecked read `unsafe` (Note [Step kernel] in `src/cube`).
    (
        "av[r] = a[a_rows[r] + i];",
        "av[r] = a.read_unchecked(a_rows[r] + i);",
    ),
    (
        "let bv = b[bi + g * g_stride + cols[u]];",
        "let bv = b.read_unchecked(bi + g * g_stride + cols[u]);",
    ),
    // cubecl 0.11 no longer passes a `&mut Tensor` where a `&Tensor` is expected.
    (
        "&*dg, &g_rows, weights, w_hh, p, 0usize, &cols, direct, &mut acc, 1usize, units, rows,",
        "dg, &g_rows, weights, w_hh, p, 0usize, &cols, direct, &mut acc, 1usize, units, rows,",
    ),
    ("&*dn,", "dn,"),
];

#[test]
fn the_two_kernel_copies_differ_only_where_cubecl_does() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |path: &str| {
        std::fs::read_to_string(format!("{root}/{path}"))
            .unwrap_or_else(|e| panic!("expected to read {path}, got {e}"))
    };
    let old = code(&read("../burn-0.21/src/cube/kernel.rs"));
    let mut undone = 0;
    let new: Vec<String> = code(&read("src/cube/kernel.rs"))
        .into_iter()
        .map(
            |line| match CUBECL_0_11.iter().find(|(new, _)| *new == line) {
                Some((_, old)) => {
                    undone += 1;
                    old.to_string()
                }
                None => line,
            },
        )
        .collect();
    assert_eq!(undone, 4, "expected each known difference once");
    assert_eq!(
        old.len(),
        new.len(),
        "expected as many code lines in both copies"
    );
    for (i, (a, b)) in old.iter().zip(&new).enumerate() {
        assert_eq!(
            a, b,
            "code line {i}: expected the 0.21 copy's line, got this line's"
        );
    }
}
