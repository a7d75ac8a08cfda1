# Plots of the RL demo, from rl-report's data files.
#   gnuplot -e "dir='OUT/plots'" scripts/rl-plots.gp
# learning.png: reward and sampled accuracy per step, sync vs async, against
#   wall time. timeline.png: what each process did (Gantt), sync above async.
if (!exists("dir")) dir = "."
set terminal pngcairo size 1200,500 font ",10" noenhanced
set output dir."/learning.png"
set multiplot layout 1,2 title "RL on Zorplex: training batches (sampled at T, not the greedy eval)"
set xlabel "wall time since the first publish (s)"
set ylabel "fraction of episodes correct"
set key bottom right
set grid
plot dir."/curve-sync.dat" using 2:4 with linespoints title "sync", \
     dir."/curve-async.dat" using 2:4 with linespoints title "async"
set ylabel "mean reward"
plot dir."/curve-sync.dat" using 2:3 with linespoints title "sync", \
     dir."/curve-async.dat" using 2:3 with linespoints title "async"
unset multiplot

set output dir."/timeline.png"
set terminal pngcairo size 1400,600 font ",10" noenhanced
if (!exists("window")) window = 40
set multiplot layout 2,1 title sprintf("What each process does (first %d s of each run)", window)
set xrange [0:window]
set yrange [-0.6:2.6]
set ytics ("trainer" 0, "generator-0" 1, "generator-1" 2)
set xlabel "seconds since the first publish"
unset ylabel
set style fill solid 0.9 noborder
set key outside right
# event index: 0 generate, 1 train, 2 wait, 3 pull, 4 publish, 5 send, 6 checkpoint
set palette defined (0 "#2ca02c", 1 "#1f77b4", 2 "#dddddd", 3 "#d62728", 4 "#ff7f0e", 5 "#9467bd", 6 "#8c564b")
set cbrange [0:6]
unset colorbox
do for [run in "sync async"] {
  set title run
  plot dir."/timeline-".run.".dat" using (($2+$3)/2):1:(($3-$2)/2):(0.35):4 with boxxyerror palette notitle, \
       NaN with boxes lc rgb "#2ca02c" title "generate", \
       NaN with boxes lc rgb "#1f77b4" title "train", \
       NaN with boxes lc rgb "#dddddd" title "wait", \
       NaN with boxes lc rgb "#d62728" title "pull", \
       NaN with boxes lc rgb "#ff7f0e" title "publish"
}
unset multiplot
