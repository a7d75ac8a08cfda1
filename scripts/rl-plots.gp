# Plots of the RL demo, from rl-report's data files.
#   gnuplot -e "dir='OUT/plots'" scripts/rl-plots.gp
# learning.png: the fraction of training episodes solved (sampled at the
#   generators' temperature, every one of the step's batch, before the
#   zero-variance filter; points per step, lines the mean of the last 5
#   steps) against wall time, sync vs async, the trainer's periodic greedy
#   evaluations on a fixed held-out subset (trainer --eval-every; squares),
#   and the full greedy held-out evaluations as horizontal lines. timeline.png: what each process did
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
  set title "RL on Zorplex: training episodes solved (sampled), and greedy accuracy on 200 held-out tasks"
  set xlabel "wall time since the first publish (s)"
  set ylabel "fraction correct"
  set key outside right
  set grid
  set yrange [0:1]
  plot dir."/curve-sync.dat" using 2:4 with points pt 7 ps 0.5 lc rgb "#9ecae1" title "sync, per step", \
       dir."/curve-sync.dat" using 2:7 with lines lw 2 lc rgb "#1f77b4" title "sync, last 5 steps", \
       dir."/curve-async.dat" using 2:4 with points pt 7 ps 0.5 lc rgb "#fdae6b" title "async, per step", \
       dir."/curve-async.dat" using 2:7 with lines lw 2 lc rgb "#e6550d" title "async, last 5 steps", \
       dir."/evalcurve-sync.dat" using 2:3 with linespoints pt 5 ps 1 lw 2 lc rgb "#08306b" title "sync, greedy on the held-out subset", \
       dir."/evalcurve-async.dat" using 2:3 with linespoints pt 5 ps 1 lw 2 lc rgb "#7f2704" title "async, greedy on the held-out subset", \
       eval_before with lines dt 2 lw 2 lc rgb "#555555" title sprintf("greedy eval before: %.1f%%", 100 * eval_before), \
       eval_after_sync with lines dt 3 lw 2 lc rgb "#1f77b4" title sprintf("greedy eval after sync: %.1f%%", 100 * eval_after_sync), \
       eval_after_async with lines dt 3 lw 2 lc rgb "#e6550d" title sprintf("greedy eval after async: %.1f%%", 100 * eval_after_async)
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
