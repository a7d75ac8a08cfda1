# Plots of the RL demo, from rl-report's data files.
#   gnuplot -e "dir='OUT/plots'" scripts/rl-plots.gp
# learning.png: the fraction of sampled episodes solved at the generators
#   (every trajectory they sampled, at their temperature, before any filter;
#   points per round, lines the mean of the last 8 rounds) against wall time,
#   sync vs async, the trainer's periodic greedy evaluations on fixed held-out
#   subsets (trainer --eval-every --eval-difficulty: squares medium, triangles
#   easy), and the full greedy held-out evaluations on the target environment
#   (medium) as horizontal lines. timeline.png: what each process did
#   (Gantt), sync above async.
# Options (-e): window=SECONDS (default 40) and from=SECONDS (default 0) pick
#   the timeline's span; runs="NAME NAME" picks its runs, the names given to
#   rl-report --run (default "sync async"), e.g. runs="off on" to set a run with
#   generator --in-flight-updates off above one with them on.
if (!exists("dir")) dir = "."
eval_before = NaN; eval_after_sync = NaN; eval_after_async = NaN
if (system("test -f ".dir."/evals.gp && echo 1") eq "1") load dir."/evals.gp"

if (!exists("window")) window = 40
if (!exists("from")) from = 0
if (!exists("runs")) runs = "sync async"
# learning.png compares sync and async: drawn for the default runs only.
if (runs eq "sync async") {
  set terminal pngcairo size 1200,550 font ",10" noenhanced
  set output dir."/learning.png"
  set title "RL on Zorplex: episodes solved at the generators (sampled), and greedy accuracy on held-out tasks"
  set xlabel "wall time since the first publish (s)"
  set ylabel "fraction correct"
  set key outside right
  set grid
  set yrange [0:1]
  # rl-report writes both subsets' files; one the trainer did not evaluate is empty (drawn as nothing).
  curve(run, suffix) = dir."/evalcurve-".run.suffix.".dat"
  plot dir."/gencurve-sync.dat" using 1:4 with points pt 7 ps 0.4 lc rgb "#9ecae1" title "sync, sampled, per round", \
       dir."/gencurve-sync.dat" using 1:5 with lines lw 2 lc rgb "#1f77b4" title "sync, sampled, last 8 rounds", \
       dir."/gencurve-async.dat" using 1:4 with points pt 7 ps 0.4 lc rgb "#fdae6b" title "async, sampled, per round", \
       dir."/gencurve-async.dat" using 1:5 with lines lw 2 lc rgb "#e6550d" title "async, sampled, last 8 rounds", \
       curve("sync", "-medium") using 2:3 with linespoints pt 5 ps 1 lw 2 lc rgb "#08306b" title "sync, greedy, medium subset", \
       curve("async", "-medium") using 2:3 with linespoints pt 5 ps 1 lw 2 lc rgb "#7f2704" title "async, greedy, medium subset", \
       curve("sync", "") using 2:3 with linespoints pt 9 ps 1 lw 1 dt 2 lc rgb "#08306b" title "sync, greedy, easy subset", \
       curve("async", "") using 2:3 with linespoints pt 9 ps 1 lw 1 dt 2 lc rgb "#7f2704" title "async, greedy, easy subset", \
       eval_before with lines dt 2 lw 2 lc rgb "#555555" title sprintf("medium, 200 held-out, before: %.1f%%", 100 * eval_before), \
       eval_after_sync with lines dt 3 lw 2 lc rgb "#1f77b4" title sprintf("medium, 200 held-out, after sync: %.1f%%", 100 * eval_after_sync), \
       eval_after_async with lines dt 3 lw 2 lc rgb "#e6550d" title sprintf("medium, 200 held-out, after async: %.1f%%", 100 * eval_after_async)
}

set output dir."/timeline.png"
set terminal pngcairo size 1400,600 font ",10" noenhanced
set multiplot layout words(runs),1 title sprintf("What each process does (%g s to %g s of each run)", from, from + window)
unset title
set xrange [from:from + window]
set yrange [-0.6:2.6]
set ytics ("trainer" 0, "generator-0" 1, "generator-1" 2)
set xlabel "seconds since the first publish"
unset ylabel
set style fill solid 0.9 noborder
set key outside right
# event index: 0 generate, 1 train, 2 wait, 3 pull, 4 publish, 5 send, 6 checkpoint, 7 eval, 8 blocked
# (an in-flight install: microseconds, drawn as a mark); a background pull is a thin bar above its row.
set palette defined (0 "#2ca02c", 1 "#1f77b4", 2 "#dddddd", 3 "#d62728", 4 "#ff7f0e", 5 "#9467bd", 6 "#8c564b", 7 "#e377c2", 8 "#000000")
set cbrange [0:8]
unset colorbox
do for [run in runs] {
  set title run
  plot dir."/timeline-".run.".dat" using (($2+$3)/2):1:(($3-$2)/2):7:4 with boxxyerror palette notitle, \
       dir."/timeline-".run.".dat" using ($4 == 8 ? $2 : NaN):1 with points pt 7 ps 0.5 lc rgb "#000000" title "install", \
       NaN with boxes lc rgb "#2ca02c" title "generate", \
       NaN with boxes lc rgb "#1f77b4" title "train", \
       NaN with boxes lc rgb "#dddddd" title "wait", \
       NaN with boxes lc rgb "#d62728" title "pull", \
       NaN with boxes lc rgb "#ff7f0e" title "publish", \
       NaN with boxes lc rgb "#e377c2" title "eval"
}
unset multiplot
