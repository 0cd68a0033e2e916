//! Decimal text to `f64` for the forms Matrix Market values take — `[+-]digits[.digits][e[+-]digits]`
//! with at most 19 significant digits — correctly rounded, and `None` for anything else or
//! whenever the result cannot be guaranteed, so that the caller falls back to
//! `str::parse::<f64>`. Either way the value is bit-identical to std's.
//!
//! A value `w · 10^-k` (w < 10^19, 1 ≤ k ≤ [`MAX_K`]) is computed as `w · 5^-k · 2^-k` with a
//! 128-bit truncation `P_k` of `5^-k` (a table built at compile time by long division): the
//! 192-bit product `w · P_k` is below the exact product by less than `2^64` units of its last
//! bit, far below the 54th bit that decides the rounding, so the result is exact unless the bits
//! under the rounding position are within that margin of a boundary (then: `None`). Positive
//! powers of ten are exact in `u128` and rounded by the integer-to-float conversion, which
//! rounds to nearest, ties to even.

/// Largest `k` of `10^-k` taken: values down to about 1e-48 (smaller ones go to std).
const MAX_K: usize = 48;

/// `(P_k, L_k)` for `k = 0..=MAX_K`: `L_k` is the bit length of `5^k` and
/// `P_k = floor(2^(127 + L_k) / 5^k)`, so `2^127 ≤ P_k < 2^128` (entry 0 unused).
static INV_POW5: [(u128, u32); MAX_K + 1] = inv_pow5_table();

const fn inv_pow5_table() -> [(u128, u32); MAX_K + 1] {
    let mut table = [(0u128, 0u32); MAX_K + 1];
    let mut k = 1;
    let mut pow5: u128 = 1;
    while k <= MAX_K {
        pow5 *= 5;
        let len = 128 - pow5.leading_zeros();
        // Long division of 2^(127 + len) by 5^k, one bit at a time: the remainder stays below
        // 5^k < 2^127 (k ≤ 54), so doubling it cannot overflow; the quotient is below 2^128.
        let mut rem: u128 = 1;
        let mut quot: u128 = 0;
        let mut bit = 0;
        while bit < 127 + len {
            rem <<= 1;
            quot <<= 1;
            if rem >= pow5 {
                rem -= pow5;
                quot |= 1;
            }
            bit += 1;
        }
        table[k] = (quot, len);
        k += 1;
    }
    table
}

/// `10^q` for `q = 0..=38` (all fit `u128`).
static POW10: [u128; 39] = {
    let mut t = [1u128; 39];
    let mut q = 1;
    while q < 39 {
        t[q] = t[q - 1] * 10;
        q += 1;
    }
    t
};

/// Parses `word` when it is a plain decimal number the fast path can round exactly; `None`
/// otherwise (including every string std rejects, `inf`, `nan`, more than 19 significant
/// digits, exponents past the tables).
#[inline]
pub(super) fn parse_f64(word: &[u8]) -> Option<f64> {
    match parse_prefix(word) {
        Some((v, len)) if len == word.len() => Some(v),
        _ => None,
    }
}

/// The number at the start of `text` and how many bytes it takes, when it is a plain decimal
/// the fast path can round exactly; the caller checks what follows (a blank, the line end).
/// A prefix that std would read differently as part of a longer word (`1.5x`, `1e5.0`) is only
/// ever accepted if the caller then finds a delimiter, so nothing std rejects gets through.
#[inline]
pub(super) fn parse_prefix(text: &[u8]) -> Option<(f64, usize)> {
    let (negative, mut i) = match text.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    let first_digit = i;
    // Leading zeros are not significant.
    while text.get(i) == Some(&b'0') {
        i += 1;
    }
    let mut w: u64 = 0;
    let start = i;
    i = digits(text, i, &mut w);
    let mut significant = i - start;
    let mut any_digit = i > first_digit;
    // Digits after the point, each one a power of ten down.
    let mut exponent: i64 = 0;
    if text.get(i) == Some(&b'.') {
        i += 1;
        let fraction = i;
        if significant == 0 {
            while text.get(i) == Some(&b'0') {
                i += 1;
            }
        }
        let start = i;
        i = digits(text, i, &mut w);
        significant += i - start;
        exponent = -((i - fraction) as i64);
        any_digit |= i > fraction;
    }
    // Up to 19 digits, `w` is exact (below 10^19 < 2^64); past that it wrapped: std's turn.
    if !any_digit || significant > 19 {
        return None;
    }
    if let Some(b'e' | b'E') = text.get(i) {
        i += 1;
        let negative_exp = match text.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        let mut e: i64 = 0;
        while let Some(&b) = text.get(i) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            // Exponents of more than 5 digits are left to std (so is everything past the
            // tables anyway).
            if i - start == 5 {
                return None;
            }
            e = e * 10 + i64::from(d);
            i += 1;
        }
        if i == start {
            return None;
        }
        exponent += if negative_exp { -e } else { e };
    }
    let magnitude = if w == 0 {
        0.0
    } else if exponent >= 0 {
        let scaled = POW10
            .get(usize::try_from(exponent).ok()?)?
            .checked_mul(u128::from(w))?;
        // Integer to float conversion rounds to nearest, ties to even.
        scaled as f64
    } else {
        times_inv_pow10(w, usize::try_from(-exponent).ok()?)?
    };
    Some((if negative { -magnitude } else { magnitude }, i))
}

/// The number written by eight digit values (0..=9), one per byte, the first (lowest) byte
/// the most significant: pairs, then quadruples, then the eight.
#[inline(always)]
pub(super) fn eight_digits(d: u64) -> u64 {
    let pairs = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let quads = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    (quads.wrapping_mul(10_000) + (quads >> 32)) & 0xFFFF_FFFF
}

/// Appends the decimal digits at `text[i..]` to `w` (wrapping: the caller counts them) and
/// returns the position after them; eight at a time while eight bytes are left.
#[inline(always)]
fn digits(text: &[u8], mut i: usize, w: &mut u64) -> usize {
    while let Some(chunk) = text.get(i..).and_then(|t| t.first_chunk::<8>()) {
        let x = u64::from_le_bytes(*chunk);
        // Every byte in b'0'..=b'9': its high nibble is 3, and adding 6 keeps it 3.
        let high = 0xF0F0_F0F0_F0F0_F0F0u64;
        if (x & high) | ((x.wrapping_add(0x0606_0606_0606_0606) & high) >> 4)
            != 0x3333_3333_3333_3333
        {
            break;
        }
        let eight = eight_digits(x - 0x3030_3030_3030_3030);
        *w = w.wrapping_mul(100_000_000).wrapping_add(eight);
        i += 8;
    }
    while let Some(&b) = text.get(i) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        *w = w.wrapping_mul(10).wrapping_add(u64::from(d));
        i += 1;
    }
    i
}

/// `w · 10^-k` correctly rounded, for `w > 0`; `None` when the 192-bit product cannot decide
/// the rounding, `k` is past the table, or the result is not a normal number.
#[inline]
fn times_inv_pow10(w: u64, k: usize) -> Option<f64> {
    let &(p, len) = INV_POW5.get(k)?;
    if k == 0 {
        return None;
    }
    let shift = w.leading_zeros();
    let wn = u128::from(w << shift);
    // Z = wn · P, 192 bits as z2:z1:z0 (z0 is not needed: it only moves Z by < 2^64).
    let hi = wn * (p >> 64);
    let lo = wn * (p & u128::from(u64::MAX));
    let mid = (lo >> 64) + (hi & u128::from(u64::MAX));
    let z1 = mid as u64;
    let z2 = ((hi >> 64) + (mid >> 64)) as u64;
    // Z ≥ 2^190: the top bit of z2 is bit 63 or 62. The 53 bits from it are the mantissa, the
    // next one the rounding bit at `round` (bit index within z2).
    let top = z2.leading_zeros();
    let round = 10 - top;
    let mask = (1u64 << round) - 1;
    let below = z2 & mask;
    let m54 = z2 >> round;
    // The exact product is Z + δ with 0 ≤ δ < 2^64: undecidable when the bits under the
    // rounding bit are all ones down to z1 (δ could carry into it), or, with the rounding bit
    // set, all zeros down to z1 (the value could be a tie or just past one).
    let mantissa = if m54 & 1 == 0 {
        if below == mask && z1 == u64::MAX {
            return None;
        }
        m54 >> 1
    } else {
        if below == 0 && z1 == 0 {
            return None;
        }
        (m54 >> 1) + 1
    };
    // value = Z · 2^-(shift + 127 + len + k) = mantissa · 2^(round + 129 - shift - 127 - len - k)
    let mut e2 = i64::from(round) + 2 - i64::from(shift) - i64::from(len) - k as i64;
    let mut mantissa = mantissa;
    if mantissa == 1 << 53 {
        mantissa >>= 1;
        e2 += 1;
    }
    let biased = e2 + 52 + 1023;
    if !(1..=2046).contains(&biased) {
        return None;
    }
    Some(f64::from_bits(
        ((biased as u64) << 52) | (mantissa & ((1 << 52) - 1)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn std_bits(s: &str) -> Option<u64> {
        s.parse::<f64>().ok().map(f64::to_bits)
    }

    /// Every string the fast path takes must give std's bits; returns whether it took it.
    fn check(s: &str) -> bool {
        // In place, as the scanner reads it: the same value, and the length of the word.
        for tail in ["", " 1\n", "\n", "\t"] {
            let text = format!("{s}{tail}");
            if let Some((v, len)) = parse_prefix(text.as_bytes()) {
                if len == s.len() {
                    assert_eq!(Some(v.to_bits()), std_bits(s), "`{s}` before `{tail:?}`");
                }
            }
        }
        match parse_f64(s.as_bytes()) {
            Some(v) => {
                assert_eq!(Some(v.to_bits()), std_bits(s), "`{s}`: {v:e}");
                true
            }
            None => false,
        }
    }

    #[test]
    fn a_prefix_stops_at_the_first_byte_that_is_not_part_of_the_number() {
        assert_eq!(parse_prefix(b"0.25 7\n"), Some((0.25, 4)));
        assert_eq!(parse_prefix(b"-1e3\t"), Some((-1000.0, 4)));
        assert_eq!(
            parse_prefix(b"12345678.87654321x"),
            Some((12345678.87654321, 17))
        );
        // The caller then finds `x`, `.` or `d` where a blank must be, and asks std.
        assert_eq!(parse_prefix(b"1.5x"), Some((1.5, 3)));
        assert_eq!(parse_prefix(b"1e5.0"), Some((1e5, 3)));
        assert_eq!(parse_prefix(b"1.5d3"), Some((1.5, 3)));
        assert_eq!(parse_prefix(b"1e+"), None);
        assert_eq!(parse_prefix(b"nan"), None);
    }

    #[test]
    fn table_entries_are_normalised() {
        for &(p, len) in &INV_POW5[1..] {
            assert_eq!(p.leading_zeros(), 0);
            assert!(len > 0);
        }
        // 5^-1 = 0.2 = 0.8 · 2^-2: P_1 = floor(2^130 / 5).
        assert_eq!(INV_POW5[1], ((1u128 << 127) / 5 * 8 + 4, 3));
    }

    #[test]
    fn plain_forms_are_taken_and_match_std() {
        for s in [
            "0.8364128047185735",
            "0.12345678901234567",
            "1",
            "-1",
            "+1.5",
            ".5",
            "5.",
            "-.25e1",
            "0.000123",
            "123456789012345678",
            "1e10",
            "1.7976931348623157e308",
            "2.2250738585072014e-308",
            "9007199254740993",
            "18446744073709551615",
            "3.141592653589793",
            "-0",
            "0e999",
            "1E-5",
            "6.02214076e+23",
        ] {
            check(s);
        }
        for s in [
            "0.8364128047185735",
            "0.12345678901234567",
            "1",
            "+1.5",
            ".5",
            "3.141592653589793",
        ] {
            assert!(check(s), "`{s}` should take the fast path");
        }
        assert_eq!(
            parse_f64(b"-0").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
    }

    #[test]
    fn everything_else_is_left_to_std() {
        for s in [
            "",
            "+",
            "-",
            ".",
            "e5",
            "1e",
            "1e+",
            "1.2.3",
            "1..2",
            "inf",
            "-inf",
            "nan",
            "NaN",
            "infinity",
            "1d5",
            "0x10",
            "1 ",
            " 1",
            "1_0",
            "--1",
            "+-1",
            // Past 19 significant digits, past the exponent tables, subnormal, overflow.
            "12345678901234567890",
            "1.00000000000000011102230246251565",
            "1e-400",
            "4.9e-324",
            "2.2250738585072011e-308",
            "1e309",
            "1e400",
            "1e123456",
        ] {
            if let Some(v) = parse_f64(s.as_bytes()) {
                assert_eq!(Some(v.to_bits()), std_bits(s), "`{s}`");
            }
        }
        for s in [
            "", ".", "1e", "inf", "nan", "1d5", "1.2.3", "+-1", "4.9e-324", "1e309",
        ] {
            assert_eq!(parse_f64(s.as_bytes()), None, "`{s}`");
        }
    }

    /// A small deterministic generator (the crate's tests need no `rand`).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn random_decimals_match_std() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut taken = 0;
        let n = 300_000;
        for _ in 0..n {
            let digits = 1 + rng.below(21) as usize;
            let mut s = String::new();
            match rng.below(4) {
                0 => s.push('-'),
                1 => s.push('+'),
                _ => {}
            }
            let body: String = (0..digits)
                .map(|_| char::from(b'0' + rng.below(10) as u8))
                .collect();
            let point = rng.below(digits as u64 + 2) as usize;
            if point <= digits {
                s.push_str(&body[..point]);
                s.push('.');
                s.push_str(&body[point..]);
            } else {
                s.push_str(&body);
            }
            if rng.below(3) == 0 {
                s.push(if rng.below(2) == 0 { 'e' } else { 'E' });
                let e = rng.below(700) as i64 - 350;
                s.push_str(&e.to_string());
            }
            if check(&s) {
                taken += 1;
            }
        }
        assert!(taken > n / 2, "only {taken} of {n} took the fast path");
    }

    #[test]
    fn shortest_representations_round_trip() {
        // What writers print (Rust's Display, Python's repr): 17 digits at most.
        let mut rng = Rng(12345);
        let mut unit_taken = 0;
        let n = 200_000;
        for _ in 0..n {
            let x = f64::from_bits(rng.next() & !(1 << 63));
            if !x.is_finite() {
                continue;
            }
            for s in [format!("{x}"), format!("{x:e}"), format!("{:.17e}", x)] {
                check(&s);
            }
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            if check(&format!("{u}")) {
                unit_taken += 1;
            }
        }
        // Values in [0, 1) as the benchmark files hold them: (nearly) all on the fast path.
        assert!(unit_taken > n * 99 / 100, "{unit_taken} of {n}");
    }

    #[test]
    fn near_ties_and_boundaries_match_std() {
        // Midpoints between neighbouring doubles, written with 17 to 19 digits, and values
        // next to powers of two.
        let mut rng = Rng(777);
        for _ in 0..100_000 {
            let x = f64::from_bits(rng.next() % 0x7fe0_0000_0000_0000 + (1 << 52));
            let y = f64::from_bits(x.to_bits() + 1);
            let mid = x / 2.0 + y / 2.0;
            for digits in 16..19 {
                check(&format!("{mid:.digits$e}"));
                check(&format!("{x:.digits$e}"));
            }
        }
        for e in -300..300 {
            let p = 2f64.powi(e);
            for digits in 15..19 {
                check(&format!("{p:.digits$e}"));
            }
        }
    }
}
