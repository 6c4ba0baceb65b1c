//! GPU ISA names (`gfx1010`, `gfx90a`) and their KFD encoding.

use std::fmt;

/// A GPU ISA as KFD encodes it: `gfx_target_version = major*10000 + minor*100 + stepping`
/// (gfx1010 = 100100, gfx90a = 90010).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gfx(pub u32);

impl Gfx {
    pub fn major(self) -> u32 {
        self.0 / 10000
    }
    pub fn minor(self) -> u32 {
        (self.0 / 100) % 100
    }
    pub fn stepping(self) -> u32 {
        self.0 % 100
    }

    /// Parses a gfx name: `gfx` + major (decimal) + minor (one decimal digit) + stepping
    /// (one hex digit), as in gfx1010, gfx1100, gfx90a, gfx942.
    pub fn parse(name: &str) -> Option<Gfx> {
        let digits = name.trim().to_ascii_lowercase();
        let digits = digits.strip_prefix("gfx")?;
        if digits.len() < 3 || !digits.is_ascii() {
            return None;
        }
        let (major, rest) = digits.split_at(digits.len() - 2);
        let minor = rest[..1].parse::<u32>().ok()?;
        let stepping = u32::from_str_radix(&rest[1..], 16).ok()?;
        if major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) || major.len() > 2 {
            return None;
        }
        let major: u32 = major.parse().ok()?;
        if major == 0 {
            return None;
        }
        Some(Gfx(major * 10000 + minor * 100 + stepping))
    }
}

impl fmt::Display for Gfx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return write!(f, "unknown");
        }
        write!(
            f,
            "gfx{}{}{:x}",
            self.major(),
            self.minor(),
            self.stepping()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_names_round_trip() {
        for (name, v) in [
            ("gfx1010", 100100),
            ("gfx1013", 100103),
            ("gfx1030", 100300),
            ("gfx1036", 100306),
            ("gfx1100", 110000),
            ("gfx90a", 90010),
            ("gfx942", 90402),
            ("gfx803", 80003),
        ] {
            let g = Gfx::parse(name).unwrap();
            assert_eq!(g, Gfx(v), "{name}");
            assert_eq!(g.to_string(), name);
        }
        assert_eq!(Gfx::parse("GFX1031"), Some(Gfx(100301)));
        for bad in [
            "", "gfx", "gfx10", "1010", "gfx10z0", "gfxa010", "gfx0010", "gfx10100", "gfx1é0",
        ] {
            assert_eq!(Gfx::parse(bad), None, "{bad}");
        }
        assert_eq!(Gfx(0).to_string(), "unknown");
    }
}
