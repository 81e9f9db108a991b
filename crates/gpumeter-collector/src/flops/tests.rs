//! Tests of FLOP counting without a GPU: metric selection, pairing ranges with launches,
//! and the configuration check.

use gpumeter_core::ops::SASS_OP_METRICS;

use super::*;
use crate::pmsampling::MetricProbe;

struct Fake {
    bases: Vec<String>,
    refuse: Vec<&'static str>,
}

impl MetricProbe for Fake {
    fn base_counters(&mut self) -> Result<Vec<String>, CuptiError> {
        Ok(self.bases.clone())
    }
    fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError> {
        Ok(!metrics.iter().any(|m| self.refuse.contains(m)))
    }
}

impl PassProbe for Fake {
    fn passes(&mut self, metrics: &[&str]) -> Result<usize, CuptiError> {
        Ok(metrics.len().div_ceil(4))
    }
}

#[test]
fn selection_takes_what_the_chip_lists_and_leaves_sparsity_parts() {
    let mut bases: Vec<String> = SASS_OP_METRICS
        .iter()
        .map(|m| m.name)
        .filter(|m| !m.contains("_op_h"))
        .map(|m| m.trim_end_matches(".sum").to_string())
        .collect();
    for b in [
        "sm__ops_path_tensor_src_fp16_dst_fp32",
        "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on",
        "sm__ops_path_tensor_src_fp64",
        "smsp__ops_path_tensor_src_fp64",
        "sm__inst_executed_pipe_tensor",
    ] {
        bases.push(b.to_string());
    }
    let mut p = Fake {
        bases,
        refuse: vec!["sm__ops_path_tensor_src_fp64.sum"],
    };
    let s = select_flops_metrics(&mut p).expect("selection");
    assert_eq!(s.sass.len(), 6, "{s:?}");
    assert_eq!(s.tensor, ["sm__ops_path_tensor_src_fp16_dst_fp32.sum"]);
    assert_eq!(s.passes, 2);
    assert!(s.tensor_not_metered().is_empty());
}

#[test]
fn ranges_pair_with_launches_in_order_and_drops_leave_launches_without_counts() {
    let mut o = LaunchOrder::default();
    for c in [7, 0, 8, 9] {
        o.launch(c);
    }
    assert_eq!(o.pending(), 3);
    let metrics = ["a.sum", "b.sum"];
    let d = DecodedRanges {
        ranges: vec![vec![1.0, 2.4], vec![f64::NAN, 3.0]],
        dropped: 1,
    };
    let mut t = FlopsTally::default();
    let k = o.pair(&metrics, &d, &mut t);
    assert_eq!(k.len(), 2);
    assert_eq!((k[0].correlation_id, k[1].correlation_id), (7, 8));
    assert_eq!(k[0].counters[1].value, 2);
    assert_eq!(k[1].counters.len(), 1);
    assert_eq!(
        t,
        FlopsTally {
            launches_with_counts: 2,
            launches_without_counts: 1,
            ranges_without_launch: 0,
            mismatched_decodes: 0,
            unusable_values: 1,
        }
    );
    assert_eq!(o.pending(), 0);
    // Ranges without launches: which is whose is unknown, nothing is written.
    let k = o.pair(&metrics, &d, &mut t);
    assert!(k.is_empty());
    assert_eq!((t.ranges_without_launch, t.mismatched_decodes), (2, 1));
    // A launch that made no range (3 launches, 2 ranges, none dropped): none paired, so no
    // kernel gets another's counts.
    for c in [1, 2, 3] {
        o.launch(c);
    }
    let two = DecodedRanges {
        ranges: vec![vec![1.0, 1.0], vec![2.0, 2.0]],
        dropped: 0,
    };
    assert!(o.pair(&metrics, &two, &mut t).is_empty());
    assert_eq!((t.launches_without_counts, t.mismatched_decodes), (4, 2));
    assert_eq!(o.pending(), 0);
}

#[test]
fn config_is_validated() {
    assert!(FlopsConfig::default().validate().is_ok());
    let e = FlopsConfig { ranges_per_pass: 0 }
        .validate()
        .expect_err("0 ranges");
    assert!(e.contains("flops.ranges_per_pass is 0"), "{e}");
    assert!(FlopsConfig {
        ranges_per_pass: 65_537
    }
    .validate()
    .is_err());
}
