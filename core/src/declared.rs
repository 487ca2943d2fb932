//! The outputs a fused custom op declares before it runs, and the check of what its
//! execution returned (each front-end's fusion module, Note [Declared outputs] there).

use core::fmt::Debug;

use crate::GradsWanted;

/// The names of a forward's outputs, in declaration order: `y`, `h_n`, `c_n` (when the
/// mode has a cell state), then `reserve[i]` for each of the reserve's `reserve` tensors.
pub fn forward_names(cell: bool, reserve: usize) -> Vec<String> {
    let mut names = vec!["y".to_string(), "h_n".to_string()];
    if cell {
        names.push("c_n".into());
    }
    names.extend((0..reserve).map(|i| format!("reserve[{i}]")));
    names
}

/// The names of a backward's outputs, in declaration order: `dx` (when wanted), `dh0`,
/// `dc0` (when the mode has a cell state), `dweights` (when wanted). A gradient nobody
/// wants is not declared, so that the op need not compute it (Note [Gradients not
/// wanted] in the CPU kernel's backward).
pub fn backward_names(cell: bool, wanted: GradsWanted) -> Vec<String> {
    let mut names = Vec::with_capacity(4);
    if wanted.x {
        names.push("dx".to_string());
    }
    names.push("dh0".to_string());
    if cell {
        names.push("dc0".into());
    }
    if wanted.weights {
        names.push("dweights".into());
    }
    names
}

/// A backward's results as its declared outputs, in [`backward_names`] order: the wanted
/// gradients, `dh0` and `dc0`. A gradient a backend computed without being asked is
/// dropped.
///
/// # Panics
///
/// If a wanted gradient is missing (`None`), naming it: its declared output would have
/// no tensor behind it.
pub fn backward_outputs<T>(
    wanted: GradsWanted,
    dx: Option<T>,
    dh0: T,
    dc0: Option<T>,
    dweights: Option<T>,
) -> Vec<T> {
    let need = |t: Option<T>, want: bool, name: &str| -> Option<T> {
        if !want {
            return None;
        }
        Some(t.unwrap_or_else(|| {
            panic!("expected the backend's backward to return {name}, which was wanted, got None")
        }))
    };
    let dx = need(dx, wanted.x, "dx");
    let dweights = need(dweights, wanted.weights, "dweights");
    dx.into_iter()
        .chain([dh0])
        .chain(dc0)
        .chain(dweights)
        .collect()
}

/// Whether the tensors op `op`'s execution returned (`got`: shape and dtype each) are the
/// ones it declared at registration (`declared`, named `names`), in count, shape and
/// dtype; the error names the first mismatch.
pub fn check_declared<S, D>(
    op: &str,
    names: &[String],
    declared: &[(S, D)],
    got: &[(S, D)],
) -> Result<(), String>
where
    S: AsRef<[usize]>,
    D: PartialEq + Debug,
{
    if got.len() != declared.len() {
        return Err(format!(
            "expected {op} to return the {} tensors it declared ({}), got {}: a setting the \
             inner backend reads changed between registration and execution, or the backend \
             declares its outputs wrongly",
            declared.len(),
            names.join(", "),
            got.len()
        ));
    }
    for ((name, (shape, dtype)), (got_shape, got_dtype)) in names.iter().zip(declared).zip(got) {
        if shape.as_ref() != got_shape.as_ref() || dtype != got_dtype {
            return Err(format!(
                "expected {op}'s {name} of shape {:?} and dtype {dtype:?}, as declared at \
                 registration, got shape {:?} and dtype {got_dtype:?}",
                shape.as_ref(),
                got_shape.as_ref()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum DType {
        F32,
        F16,
    }

    /// An LSTM training forward's declaration: y, h_n, c_n, one reserve tensor.
    fn declared() -> Vec<(Vec<usize>, DType)> {
        vec![
            (vec![5, 2, 3], DType::F32),
            (vec![1, 2, 3], DType::F32),
            (vec![1, 2, 3], DType::F32),
            (vec![104], DType::F32),
        ]
    }

    fn check(got: &[(Vec<usize>, DType)]) -> Result<(), String> {
        let names = forward_names(true, 1);
        check_declared("fused_rnn_forward", &names, &declared(), got)
    }

    #[test]
    fn the_declared_outputs_pass_the_check() {
        assert_eq!(check(&declared()), Ok(()));
        assert_eq!(forward_names(true, 1), ["y", "h_n", "c_n", "reserve[0]"]);
        assert_eq!(forward_names(false, 0), ["y", "h_n"]);
        let all = GradsWanted::ALL;
        assert_eq!(backward_names(false, all), ["dx", "dh0", "dweights"]);
        assert_eq!(backward_names(true, all), ["dx", "dh0", "dc0", "dweights"]);
    }

    /// Only the wanted gradients are declared, and the outputs line up with the names:
    /// an unwanted gradient a backend computed anyway is dropped, a wanted one missing
    /// panics naming it.
    #[test]
    fn only_the_wanted_gradients_are_declared() {
        let frozen = GradsWanted {
            x: true,
            weights: false,
        };
        let data = GradsWanted {
            x: false,
            weights: true,
        };
        assert_eq!(backward_names(true, frozen), ["dx", "dh0", "dc0"]);
        assert_eq!(backward_names(false, data), ["dh0", "dweights"]);
        let none = GradsWanted {
            x: false,
            weights: false,
        };
        assert_eq!(backward_names(false, none), ["dh0"]);
        let out = |w| backward_outputs(w, Some("dx"), "dh0", Some("dc0"), Some("dw"));
        assert_eq!(out(frozen), ["dx", "dh0", "dc0"]);
        assert_eq!(out(data), ["dh0", "dc0", "dw"]);
        assert_eq!(out(GradsWanted::ALL), ["dx", "dh0", "dc0", "dw"]);
        assert_eq!(
            backward_outputs(data, None, "dh0", None, Some("dw")),
            ["dh0", "dw"]
        );
        let missing = std::panic::catch_unwind(|| {
            backward_outputs(frozen, None, "dh0", None, Some("dw"));
        })
        .expect_err("a wanted dx missing");
        let message = missing
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert_eq!(
            message,
            "expected the backend's backward to return dx, which was wanted, got None"
        );
    }

    #[test]
    fn another_count_shape_or_dtype_than_declared_fails_naming_it() {
        // A reserve of another writer (another tag in its length).
        let mut reserve = declared();
        reserve[3].0 = vec![106];
        let e = check(&reserve).unwrap_err();
        assert!(
            e.contains("expected fused_rnn_forward's reserve[0] of shape [104] and dtype F32, as declared at registration, got shape [106] and dtype F32"),
            "{e}"
        );
        // The reference's reserve (several tensors) where one tensor was declared.
        let mut more = declared();
        more.push((vec![5, 2, 12], DType::F32));
        let e = check(&more).unwrap_err();
        assert!(
            e.contains("expected fused_rnn_forward to return the 4 tensors it declared (y, h_n, c_n, reserve[0]), got 5"),
            "{e}"
        );
        let e = check(&declared()[..3]).unwrap_err();
        assert!(e.contains("got 3"), "{e}");
        let mut dtype = declared();
        dtype[1].1 = DType::F16;
        let e = check(&dtype).unwrap_err();
        assert!(
            e.contains("expected fused_rnn_forward's h_n of shape [1, 2, 3] and dtype F32, as declared at registration, got shape [1, 2, 3] and dtype F16"),
            "{e}"
        );
    }
}
