//! Quirks: the variables rmcp sets for the programs it starts (`rmcp run`, the container
//! entrypoint, `rmcp_rdna.enable()`) to keep another program's known-wrong GPU code away
//! from the GPUs it is wrong for. This file owns the decision: given the GPUs the KFD
//! topology shows, the values the program would otherwise get and `RMCP_QUIRKS`, which
//! variables to set, which to keep, and what to say. The callers read the topology and the
//! environment and apply the answer; nothing here does I/O.
//!
//! Today there is one quirk. Triton's AMD backend turns loads and stores into buffer
//! instructions (`AMDGCN_USE_BUFFER_OPS`: `=1` turns it on in Triton 3.2-3.5, and it is
//! on by default since 3.6.0, as PyPI's `knobs.py` shows) whose resource
//! descriptor gets the RDNA bits (RESOURCE_LEVEL, OOB_SELECT 3) only for RDNA2 and RDNA3:
//! on gfx1010-gfx1013 (RDNA1) every access then fails the bounds check, loads read 0 and
//! stores are dropped, with no error. For a process that will see an RDNA1 GPU the knob
//! is set to `0`, unless it is already set (then it is kept, and the note says what it
//! does). PyTorch Inductor's FX graph cache does not key on the knob (Triton's own cache
//! does: `AMDGCN_USE_BUFFER_OPS` is one of its cache-invalidating variables), so when the
//! knob is set here and `TORCHINDUCTOR_CACHE_DIR` is unset or Inductor's default
//! (`<tmp>/torchinductor_<user>`), Inductor is pointed at a cache of its own beside the
//! default ([`INDUCTOR_CACHE_SUFFIX`]): the kernels compiled before with buffer ops are
//! not reused, the user's cache is left as it is (rmcp never deletes what it did not
//! make), and runs started by rmcp share one cache between them.
//!
//! Which GPUs the process will see is the topology's whole list: `*_VISIBLE_DEVICES` are
//! not modelled, so a machine with an RDNA1 GPU gets the knob even for a process that hides
//! that GPU (there it only makes Triton use global loads and stores, which are correct).

use crate::config::Quirks;
use crate::gfx::Gfx;

/// Triton's knob for buffer loads and stores on AMD GPUs.
pub const BUFFER_OPS_VARIABLE: &str = "AMDGCN_USE_BUFFER_OPS";
/// PyTorch Inductor's cache directory.
pub const INDUCTOR_CACHE_VARIABLE: &str = "TORCHINDUCTOR_CACHE_DIR";
/// Appended to Inductor's default directory to make the cache used when rmcp sets the
/// knob: `/tmp/torchinductor_alice` -> `/tmp/torchinductor_alice_rmcp_nobufferops`.
pub const INDUCTOR_CACHE_SUFFIX: &str = "_rmcp_nobufferops";

/// RDNA1: gfx1010-gfx1013, the GPUs Triton builds the CDNA buffer descriptor for.
pub fn is_rdna1(gfx: Gfx) -> bool {
    (100100..=100103).contains(&gfx.0)
}

/// How Triton reads a boolean knob (`getenv_bool`: `1`, `true`, `on` / `0`, `false`,
/// `off`, any case); None: anything else, which Triton reads as the knob's default.
pub fn triton_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" => Some(true),
        "0" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// Inductor's default cache directory, as `torch._inductor.runtime.cache_dir_utils`
/// makes it: `<tempfile.gettempdir()>/torchinductor_<getpass.getuser()>`, with `\ / : * ?
/// " < > |` in the user name turned into `_`. `tmp` is the temporary directory (trailing
/// slashes are dropped, as Python's `abspath` drops them).
pub fn inductor_default_dir(tmp: &str, user: &str) -> String {
    let tmp = match tmp.trim_end_matches('/') {
        "" => "/",
        t => t,
    };
    let user: String = user
        .chars()
        .map(|c| if "\\/:*?\"<>|".contains(c) { '_' } else { c })
        .collect();
    if tmp == "/" {
        format!("/torchinductor_{user}")
    } else {
        format!("{tmp}/torchinductor_{user}")
    }
}

/// What the program would get without rmcp: the values of the variables (None: unset or
/// empty, which Triton and Inductor treat as unset) and Inductor's default directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment<'a> {
    pub buffer_ops: Option<&'a str>,
    pub inductor_cache: Option<&'a str>,
    pub inductor_default: String,
}

/// The answer: the variables to set (in this order), and one line per thing worth saying
/// (what was set and why, or what was kept and what it does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub set: Vec<(&'static str, String)>,
    pub notes: Vec<String>,
}

/// The decision for a process that will see `gpus` (the topology's GPUs).
pub fn decide(gpus: &[Gfx], env: &Environment<'_>, quirks: Quirks) -> Decision {
    let mut d = Decision::default();
    if quirks == Quirks::Off {
        return d;
    }
    let mut rdna1: Vec<String> = gpus
        .iter()
        .filter(|g| is_rdna1(**g))
        .map(|g| g.to_string())
        .collect();
    rdna1.dedup();
    if rdna1.is_empty() {
        return d;
    }
    let which = rdna1.join(", ");
    if let Some(v) = env.buffer_ops.filter(|s| !s.is_empty()) {
        d.notes.push(match triton_bool(v) {
            Some(false) => format!(
                "{BUFFER_OPS_VARIABLE}={v} kept: Triton compiles global loads and stores, \
                 which work on {which}"
            ),
            Some(true) => format!(
                "{BUFFER_OPS_VARIABLE}={v} kept: Triton compiles buffer loads and stores, whose \
                 descriptors on {which} (RDNA1) make loads read 0 and drop stores unless the \
                 shim rewrites them as they load (RMCP_BUFFER_DESCRIPTORS=fix); unset it to let \
                 rmcp set it to 0"
            ),
            None => format!(
                "{BUFFER_OPS_VARIABLE}={v} kept: Triton reads a value other than 1/true/on or \
                 0/false/off as its default (buffer loads and stores since Triton 3.6), which \
                 on {which} (RDNA1) read 0 and drop stores; unset it to let rmcp set it to 0"
            ),
        });
        return d;
    }
    d.set.push((BUFFER_OPS_VARIABLE, "0".to_string()));
    let mut note = format!(
        "{which} (RDNA1): {BUFFER_OPS_VARIABLE}=0, because Triton's buffer loads and stores read \
         0 and drop writes there"
    );
    match env.inductor_cache.filter(|s| !s.is_empty()) {
        Some(dir) if dir.trim_end_matches('/') != env.inductor_default => {
            note.push_str(&format!(
                "; {INDUCTOR_CACHE_VARIABLE}={dir} kept: kernels Inductor compiled there with \
                 buffer ops are reused (`rmcp doctor` names them)"
            ));
        }
        _ => {
            let dir = format!("{}{INDUCTOR_CACHE_SUFFIX}", env.inductor_default);
            note.push_str(&format!(
                "; {INDUCTOR_CACHE_VARIABLE}={dir}, so that Inductor does not reuse kernels it \
                 compiled with buffer ops (its FX graph cache does not key on the knob)"
            ));
            d.set.push((INDUCTOR_CACHE_VARIABLE, dir));
        }
    }
    note.push_str("; RMCP_QUIRKS=off leaves both as they were");
    d.notes.push(note);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = "/tmp/torchinductor_alice";
    const OURS: &str = "/tmp/torchinductor_alice_rmcp_nobufferops";

    fn g(name: &str) -> Gfx {
        Gfx::parse(name).unwrap()
    }

    fn env<'a>(buffer_ops: Option<&'a str>, inductor: Option<&'a str>) -> Environment<'a> {
        Environment {
            buffer_ops,
            inductor_cache: inductor,
            inductor_default: DEFAULT.to_string(),
        }
    }

    /// (gpus, AMDGCN_USE_BUFFER_OPS, TORCHINDUCTOR_CACHE_DIR, RMCP_QUIRKS, what is set,
    /// words the note has).
    type Case = (
        &'static [&'static str],
        Option<&'static str>,
        Option<&'static str>,
        Quirks,
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
    );

    const SET_BOTH: &[(&str, &str)] =
        &[(BUFFER_OPS_VARIABLE, "0"), (INDUCTOR_CACHE_VARIABLE, OURS)];

    #[test]
    fn the_decision_table() {
        let table: &[Case] = &[
            // RDNA1 alone, nothing set: both.
            (
                &["gfx1010"],
                None,
                None,
                Quirks::On,
                SET_BOTH,
                &["gfx1010 (RDNA1)"],
            ),
            (&["gfx1013"], None, None, Quirks::On, SET_BOTH, &["gfx1013"]),
            // Empty values are unset.
            (&["gfx1012"], Some(""), Some(""), Quirks::On, SET_BOTH, &[]),
            // Inductor's default (with or without a trailing slash) is replaced.
            (&["gfx1010"], None, Some(DEFAULT), Quirks::On, SET_BOTH, &[]),
            (
                &["gfx1010"],
                None,
                Some("/tmp/torchinductor_alice/"),
                Quirks::On,
                SET_BOTH,
                &[],
            ),
            // The user's own cache is kept, and the note says so.
            (
                &["gfx1010"],
                None,
                Some("/data/ind"),
                Quirks::On,
                &[(BUFFER_OPS_VARIABLE, "0")],
                &["TORCHINDUCTOR_CACHE_DIR=/data/ind kept"],
            ),
            // The knob set by the user: kept, whatever it says, and nothing else is set.
            (
                &["gfx1010"],
                Some("1"),
                None,
                Quirks::On,
                &[],
                &["=1 kept", "RMCP_BUFFER_DESCRIPTORS"],
            ),
            (
                &["gfx1010"],
                Some("0"),
                None,
                Quirks::On,
                &[],
                &["=0 kept", "global loads"],
            ),
            (
                &["gfx1010"],
                Some("OFF"),
                None,
                Quirks::On,
                &[],
                &["=OFF kept", "global loads"],
            ),
            (
                &["gfx1010"],
                Some("yes"),
                None,
                Quirks::On,
                &[],
                &["=yes kept", "its default"],
            ),
            // RMCP_QUIRKS=off: nothing at all.
            (&["gfx1010"], None, None, Quirks::Off, &[], &[]),
            (&["gfx1010"], Some("1"), None, Quirks::Off, &[], &[]),
            // RDNA2, RDNA3, CDNA, no GPU: nothing.
            (&["gfx1030"], None, None, Quirks::On, &[], &[]),
            (&["gfx1031"], None, None, Quirks::On, &[], &[]),
            (&["gfx1100"], None, None, Quirks::On, &[], &[]),
            (&["gfx90a"], None, None, Quirks::On, &[], &[]),
            (&["gfx1014"], None, None, Quirks::On, &[], &[]),
            (&[], None, None, Quirks::On, &[], &[]),
            // A mixed machine: the RDNA1 GPU decides.
            (
                &["gfx1100", "gfx1010"],
                None,
                None,
                Quirks::On,
                SET_BOTH,
                &["gfx1010 (RDNA1)"],
            ),
            (
                &["gfx1010", "gfx1012"],
                None,
                None,
                Quirks::On,
                SET_BOTH,
                &["gfx1010, gfx1012"],
            ),
        ];
        for (gpus, ops, ind, quirks, want_set, words) in table {
            let gpus: Vec<Gfx> = gpus.iter().map(|n| g(n)).collect();
            let d = decide(&gpus, &env(*ops, *ind), *quirks);
            let set: Vec<(&str, &str)> = d.set.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(&set, want_set, "{gpus:?} {ops:?} {ind:?} {quirks:?}");
            let notes = d.notes.join("\n");
            for w in *words {
                assert!(
                    notes.contains(w),
                    "{gpus:?} {ops:?} {ind:?}: {w:?} not in {notes}"
                );
            }
            // Something is said exactly when something is set or kept on an RDNA1 GPU.
            let rdna1 = gpus.iter().any(|g| is_rdna1(*g)) && *quirks == Quirks::On;
            assert_eq!(d.notes.len(), usize::from(rdna1), "{notes}");
            if !d.set.is_empty() {
                assert!(notes.contains("RMCP_QUIRKS=off"), "{notes}");
            }
        }
    }

    #[test]
    fn rdna1_is_gfx1010_to_gfx1013() {
        for n in ["gfx1010", "gfx1011", "gfx1012", "gfx1013"] {
            assert!(is_rdna1(g(n)), "{n}");
        }
        for n in [
            "gfx1014", "gfx1030", "gfx1036", "gfx1100", "gfx906", "gfx90a",
        ] {
            assert!(!is_rdna1(g(n)), "{n}");
        }
    }

    #[test]
    fn triton_reads_booleans_like_this() {
        for (v, want) in [
            ("1", Some(true)),
            ("TRUE", Some(true)),
            (" on ", Some(true)),
            ("0", Some(false)),
            ("false", Some(false)),
            ("Off", Some(false)),
            ("yes", None),
            ("", None),
        ] {
            assert_eq!(triton_bool(v), want, "{v:?}");
        }
    }

    #[test]
    fn inductor_default_dir_is_inductors() {
        for (tmp, user, want) in [
            ("/tmp", "alice", "/tmp/torchinductor_alice"),
            ("/tmp/", "alice", "/tmp/torchinductor_alice"),
            ("/var/tmp//", "bob", "/var/tmp/torchinductor_bob"),
            ("/", "bob", "/torchinductor_bob"),
            (
                "/tmp",
                "dom\\a:b*c?d\"e<f>g|h/i",
                "/tmp/torchinductor_dom_a_b_c_d_e_f_g_h_i",
            ),
        ] {
            assert_eq!(inductor_default_dir(tmp, user), want, "{tmp} {user}");
        }
    }
}
