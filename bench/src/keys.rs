//! Record keys and the benchmark's pseudo-random numbers.
//!
//! [`Rng`] is xoshiro256** seeded through splitmix64: fast, deterministic for a seed, and good
//! enough for payload bytes and key sampling (not for anything secret). Every random choice in
//! the benchmark goes through it, so a workload's `seed` reproduces a run's keys and bodies.
//!
//! [`KeyGen`] produces the key of each record for one producer according to a
//! [`KeyDistribution`]. Keys are `key-NNNNNN` (zero-padded to at least six digits, or to the
//! width of the largest index) written into a caller-owned buffer, so after the buffer has
//! grown once no key allocates. The Zipf table (a CDF over `key_count` keys, 8 bytes each) is
//! built once in [`KeyGen::new`]; sampling is a binary search.

use std::fmt;
use std::str::FromStr;

/// Exponent used by a bare `zipf` distribution (YCSB's Zipfian constant).
pub const ZIPF_EXPONENT_DEFAULT: f64 = 0.99;
/// Minimum number of digits in a generated key.
const KEY_DIGITS_MIN: usize = 6;
const KEY_PREFIX: &[u8] = b"key-";

/// A small, fast, seedable PRNG (xoshiro256**).
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u64; 4],
}

/// One step of splitmix64: expands a seed into well-mixed words.
fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let state = [
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
        ];
        Self { state }
    }

    /// The next 64 uniformly distributed bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), with 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, bound); 0 when `bound` is 0. (Lemire's multiply-shift; the bias is below
    /// 2^-64 * bound, irrelevant here.)
    #[inline]
    pub fn next_below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let bytes = self.next_u64().to_le_bytes();
            rest.copy_from_slice(&bytes[..rest.len()]);
        }
    }
}

/// How records are keyed.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum KeyDistribution {
    /// No key: the client spreads records over partitions itself.
    #[default]
    None,
    /// Keys 0, 1, .., key_count-1, 0, 1, ..
    RoundRobin,
    /// Each key uniformly at random.
    Random,
    /// Key i with probability proportional to 1 / (i+1)^exponent: key 0 is the hottest.
    Zipf { exponent: f64 },
}

impl FromStr for KeyDistribution {
    type Err = anyhow::Error;

    /// Accepts `none`, `round-robin`, `random`, `zipf` (exponent 0.99) and `zipf:<exponent>`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        let (kind, arg) = match s.split_once(':') {
            Some((kind, arg)) => (kind.trim(), Some(arg.trim())),
            None => (s.as_str(), None),
        };
        let distribution = match kind {
            "none" | "" => KeyDistribution::None,
            "round-robin" | "round_robin" | "roundrobin" => KeyDistribution::RoundRobin,
            "random" | "uniform" => KeyDistribution::Random,
            "zipf" | "zipfian" => {
                let exponent = match arg {
                    None => ZIPF_EXPONENT_DEFAULT,
                    Some(arg) => arg.parse::<f64>().map_err(|_| {
                        anyhow::anyhow!("key distribution {s:?}: zipf exponent {arg:?} is not a number")
                    })?,
                };
                if !(exponent.is_finite() && exponent > 0.0) {
                    anyhow::bail!("key distribution {s:?}: zipf exponent must be > 0");
                }
                return Ok(KeyDistribution::Zipf { exponent });
            }
            _ => anyhow::bail!(
                "unknown key distribution {s:?}: expected none, round-robin, random, zipf or zipf:<exponent>"
            ),
        };
        if arg.is_some() {
            anyhow::bail!("key distribution {s:?} takes no argument (only zipf:<exponent> does)");
        }
        Ok(distribution)
    }
}

impl fmt::Display for KeyDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDistribution::None => f.write_str("none"),
            KeyDistribution::RoundRobin => f.write_str("round-robin"),
            KeyDistribution::Random => f.write_str("random"),
            KeyDistribution::Zipf { exponent } => write!(f, "zipf:{exponent}"),
        }
    }
}

/// The key generator of one producer.
#[derive(Clone, Debug)]
pub struct KeyGen {
    distribution: KeyDistribution,
    key_count: u64,
    /// Digits each key index is padded to.
    digits: usize,
    /// Next index of a round-robin sequence.
    next_round_robin: u64,
    rng: Rng,
    /// Zipf only: cdf[i] = P(index <= i); the last entry is exactly 1.
    cdf: Vec<f64>,
}

impl KeyGen {
    /// A generator over `key_count` keys (treated as 1 if 0). Zipf builds its CDF here, which
    /// takes a few milliseconds per million keys.
    pub fn new(distribution: KeyDistribution, key_count: u64, seed: u64) -> Self {
        let key_count = key_count.max(1);
        let digits = decimal_digits(key_count - 1).max(KEY_DIGITS_MIN);
        let cdf = match distribution {
            KeyDistribution::Zipf { exponent } => zipf_cdf(key_count, exponent),
            _ => Vec::new(),
        };
        Self {
            distribution,
            key_count,
            digits,
            next_round_robin: 0,
            rng: Rng::new(seed),
            cdf,
        }
    }

    pub fn distribution(&self) -> KeyDistribution {
        self.distribution
    }

    pub fn key_count(&self) -> u64 {
        self.key_count
    }

    /// The index (0..key_count) of the next key, or None when records are unkeyed.
    #[inline]
    pub fn next_index(&mut self) -> Option<u64> {
        match self.distribution {
            KeyDistribution::None => None,
            KeyDistribution::RoundRobin => {
                let index = self.next_round_robin;
                self.next_round_robin = (index + 1) % self.key_count;
                Some(index)
            }
            KeyDistribution::Random => Some(self.rng.next_below(self.key_count)),
            KeyDistribution::Zipf { .. } => {
                let u = self.rng.next_f64();
                let index = self.cdf.partition_point(|&c| c <= u);
                Some((index as u64).min(self.key_count - 1))
            }
        }
    }

    /// Writes the next key into `out` (replacing its contents) and returns true, or returns
    /// false (leaving `out` empty) when records are unkeyed. Does not allocate once `out` has
    /// capacity for one key.
    #[inline]
    pub fn next_key(&mut self, out: &mut Vec<u8>) -> bool {
        out.clear();
        match self.next_index() {
            Some(index) => {
                write_key(index, self.digits, out);
                true
            }
            None => false,
        }
    }
}

/// Appends `key-<index>` zero-padded to `digits`.
fn write_key(index: u64, digits: usize, out: &mut Vec<u8>) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    let mut v = index;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let start = buf.len().saturating_sub(digits).min(i);
    out.extend_from_slice(KEY_PREFIX);
    out.extend_from_slice(&buf[start..]);
}

fn decimal_digits(mut v: u64) -> usize {
    let mut digits = 1;
    while v >= 10 {
        v /= 10;
        digits += 1;
    }
    digits
}

/// The cumulative distribution of a Zipf law over `n` ranks.
fn zipf_cdf(n: u64, exponent: f64) -> Vec<f64> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut sum = 0.0;
    for rank in 1..=n {
        sum += (rank as f64).powf(-exponent);
        cdf.push(sum);
    }
    for c in &mut cdf {
        *c /= sum;
    }
    if let Some(last) = cdf.last_mut() {
        *last = 1.0;
    }
    cdf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_seed_dependent() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..100).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
        let mut zero = Rng::new(0);
        assert_ne!(zero.next_u64(), zero.next_u64());
    }

    #[test]
    fn rng_f64_and_below_stay_in_range() {
        let mut rng = Rng::new(1);
        let mut sum = 0.0;
        for _ in 0..100_000 {
            let x = rng.next_f64();
            assert!((0.0..1.0).contains(&x));
            sum += x;
            assert!(rng.next_below(10) < 10);
        }
        let mean = sum / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        assert_eq!(rng.next_below(0), 0);
    }

    #[test]
    fn rng_fill_covers_odd_lengths() {
        let mut rng = Rng::new(3);
        let mut buf = [0u8; 13];
        rng.fill(&mut buf);
        assert!(buf[8..].iter().any(|&b| b != 0));
        let mut counts = [0u32; 256];
        let mut big = vec![0u8; 256 * 400];
        rng.fill(&mut big);
        for &b in &big {
            counts[b as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (250..550).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn parses_distributions() {
        assert_eq!(
            "none".parse::<KeyDistribution>().unwrap(),
            KeyDistribution::None
        );
        assert_eq!(
            "Round-Robin".parse::<KeyDistribution>().unwrap(),
            KeyDistribution::RoundRobin
        );
        assert_eq!(
            "random".parse::<KeyDistribution>().unwrap(),
            KeyDistribution::Random
        );
        assert_eq!(
            "zipf".parse::<KeyDistribution>().unwrap(),
            KeyDistribution::Zipf {
                exponent: ZIPF_EXPONENT_DEFAULT
            }
        );
        assert_eq!(
            "zipf:1.2".parse::<KeyDistribution>().unwrap(),
            KeyDistribution::Zipf { exponent: 1.2 }
        );
        for bad in [
            "zipf:x", "zipf:0", "zipf:-1", "random:2", "hash", "zipf:inf",
        ] {
            assert!(bad.parse::<KeyDistribution>().is_err(), "{bad}");
        }
        for d in [
            KeyDistribution::None,
            KeyDistribution::RoundRobin,
            KeyDistribution::Random,
            KeyDistribution::Zipf { exponent: 1.5 },
        ] {
            assert_eq!(d.to_string().parse::<KeyDistribution>().unwrap(), d);
        }
    }

    #[test]
    fn none_writes_no_key() {
        let mut g = KeyGen::new(KeyDistribution::None, 10, 1);
        let mut out = b"stale".to_vec();
        assert!(!g.next_key(&mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn round_robin_cycles() {
        let mut g = KeyGen::new(KeyDistribution::RoundRobin, 3, 1);
        let mut out = Vec::new();
        let mut keys = Vec::new();
        for _ in 0..7 {
            assert!(g.next_key(&mut out));
            keys.push(String::from_utf8(out.clone()).unwrap());
        }
        assert_eq!(
            keys,
            [
                "key-000000",
                "key-000001",
                "key-000002",
                "key-000000",
                "key-000001",
                "key-000002",
                "key-000000"
            ]
        );
    }

    #[test]
    fn keys_are_padded_to_the_widest_index() {
        let mut g = KeyGen::new(KeyDistribution::RoundRobin, 12_345_678, 1);
        let mut out = Vec::new();
        g.next_key(&mut out);
        assert_eq!(out, b"key-00000000");
        let mut out = Vec::new();
        write_key(123, 6, &mut out);
        assert_eq!(out, b"key-000123");
        out.clear();
        write_key(u64::MAX, 6, &mut out);
        assert_eq!(out, format!("key-{}", u64::MAX).as_bytes());
    }

    #[test]
    fn next_key_reuses_the_buffer() {
        let mut g = KeyGen::new(KeyDistribution::Random, 1000, 1);
        let mut out = Vec::new();
        g.next_key(&mut out);
        let capacity = out.capacity();
        let ptr = out.as_ptr();
        for _ in 0..1000 {
            g.next_key(&mut out);
        }
        assert_eq!(out.capacity(), capacity);
        assert_eq!(out.as_ptr(), ptr);
    }

    #[test]
    fn random_covers_all_keys_roughly_uniformly() {
        let keys = 100u64;
        let draws = 100_000u64;
        let mut g = KeyGen::new(KeyDistribution::Random, keys, 42);
        let mut counts = vec![0u64; keys as usize];
        for _ in 0..draws {
            counts[g.next_index().unwrap() as usize] += 1;
        }
        let expected = (draws / keys) as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 99 degrees of freedom: mean 99, p=0.999 at about 149. Loose bound.
        assert!(chi2 < 200.0, "chi2 {chi2}");
        assert!(counts.iter().all(|&c| c > 0));
    }

    #[test]
    fn zipf_favours_low_ranks() {
        let keys = 1000u64;
        let draws = 200_000u64;
        let mut g = KeyGen::new(KeyDistribution::Zipf { exponent: 1.0 }, keys, 9);
        let mut counts = vec![0u64; keys as usize];
        for _ in 0..draws {
            counts[g.next_index().unwrap() as usize] += 1;
        }
        let max_rank = counts.iter().enumerate().max_by_key(|(_, &c)| c).unwrap().0;
        assert_eq!(max_rank, 0);
        for rank in 0..4 {
            assert!(counts[rank] > counts[rank + 1], "{:?}", &counts[..6]);
        }
        // P(0) = 1 / H(1000) ~ 0.1336; P(1) = half of it.
        let p0 = counts[0] as f64 / draws as f64;
        let p1 = counts[1] as f64 / draws as f64;
        assert!((0.12..0.15).contains(&p0), "p0 {p0}");
        assert!((0.06..0.075).contains(&p1), "p1 {p1}");
    }

    #[test]
    fn zipf_builds_a_million_keys() {
        let mut g = KeyGen::new(KeyDistribution::Zipf { exponent: 1.2 }, 1_000_000, 1);
        let mut out = Vec::new();
        for _ in 0..1000 {
            assert!(g.next_key(&mut out));
            assert!(g.next_index().unwrap() < 1_000_000);
        }
    }

    #[test]
    fn same_seed_same_sequence() {
        for d in [
            KeyDistribution::Random,
            KeyDistribution::Zipf { exponent: 0.99 },
        ] {
            let mut a = KeyGen::new(d, 5000, 11);
            let mut b = KeyGen::new(d, 5000, 11);
            let mut c = KeyGen::new(d, 5000, 12);
            let xs: Vec<_> = (0..200).map(|_| a.next_index()).collect();
            let ys: Vec<_> = (0..200).map(|_| b.next_index()).collect();
            let zs: Vec<_> = (0..200).map(|_| c.next_index()).collect();
            assert_eq!(xs, ys);
            assert_ne!(xs, zs);
        }
    }
}
