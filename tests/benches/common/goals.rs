//! The performance goals the benchmarks check their figures against (docs/performance.md): one
//! line per goal, `goal | <path> | <figure, with its ceiling> | <goal> | held or MISSED`, which
//! scripts/bench.sh gathers into one table at the end of its run.

pub fn goal(path: &str, figure: String, goal: &str, held: bool) {
    let verdict = if held { "held" } else { "MISSED" };
    println!("goal | {path} | {figure} | {goal} | {verdict}");
}
