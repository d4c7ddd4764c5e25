#!/usr/bin/env bash
# Renders docs/figures/*.svg from the CSVs the examples write (gnuplot, Debian package gnuplot-nox).
#   tools/render-figures.sh CSV_DIR OUT_DIR
# CSV_DIR holds what `rope_base_bound N DIR`, `rope_decay DIR`, `alibi_via_rope DIR`,
# `rope_extrapolation_angles DIR` and `attention_extrapolation DIR` wrote (ctest runs them into
# <build>/examples/figures-csv). Exit code 77 (skipped) when gnuplot is not installed.
# GNUPLOT=/path/to/gnuplot overrides the program (GNUPLOT=none shows the skip).
set -euo pipefail
gnuplot=${GNUPLOT:-gnuplot}
if ! command -v "$gnuplot" >/dev/null 2>&1; then
  echo "render-figures: gnuplot not installed (apt-get install gnuplot-nox); skipping"
  exit 77
fi
[ $# -eq 2 ] || { echo "usage: $0 CSV_DIR OUT_DIR" >&2; exit 2; }
csv=$1
out=$2
mkdir -p "$out"
for f in wavelength decay base_bound alibi_bias angles attention_extrapolation; do
  [ -f "$csv/$f.csv" ] || { echo "render-figures: missing $csv/$f.csv" >&2; exit 1; }
done

plot() {  # plot NAME 'gnuplot commands'
  "$gnuplot" <<GP
set terminal svg size 760,440 dynamic enhanced font "sans,12" background "white"
set output "$out/$1.svg"
set datafile separator ","
set key outside right top noenhanced
set grid
$2
GP
  echo "render-figures: $out/$1.svg"
}

plot wavelength "
set xrange [0:63]
set title 'Wavelength per pair and interpolation weight (head\\_dim 128, base 1e4, L_0 4096, factor 8)'
set xlabel 'pair i'
set ylabel 'wavelength 2{/Symbol p}/{/Symbol q}_i (tokens)'
set logscale y
set y2label 'interpolated fraction w_i'
set y2range [-0.05:1.05]
set y2tics
set arrow from graph 0, first 4096 to graph 1, first 4096 nohead dt 2 lc rgb 'gray40'
set label 'L_0 = 4096' at graph 0.02, first 5500 tc rgb 'gray40'
plot '$csv/wavelength.csv' skip 1 using 1:2 with lines lw 2 lc rgb 'black' title 'wavelength', \
     '' skip 1 using 1:3 axes x1y2 with linespoints pt 7 ps 0.4 title 'YaRN (HF ramp)', \
     '' skip 1 using 1:4 axes x1y2 with linespoints pt 5 ps 0.4 title 'NTK-by-parts', \
     '' skip 1 using 1:5 axes x1y2 with linespoints pt 9 ps 0.4 title 'Llama-3'
"

plot decay "
set title 'RoFormer relative upper bound (head\\_dim 128, base 1e4, factor 4 over 4096)'
set xlabel 'relative distance r'
set ylabel '(1/(d/2)) {/Symbol S}_j |S_j|'
set logscale x
plot for [c=2:6] '$csv/decay.csv' using 1:c with lines lw 1.5 title columnheader(c)
"

plot base_bound "
set title 'B(m, {/Symbol q}) = {/Symbol S}_i cos(m {/Symbol q}_i), head\\_dim 128'
set xlabel 'm'
set ylabel 'B'
set logscale x
set xrange [50:200000]
set arrow from graph 0, first 0 to graph 1, first 0 nohead lc rgb 'black'
plot for [c=2:5] '$csv/base_bound.csv' using 1:c with lines lw 1 title columnheader(c)
"

plot alibi_bias "
set title 'ALiBi bias -m_h (i - j) per head (16 heads, slopes 2^{-(h+1)/2})'
set xlabel 'distance i - j'
set ylabel 'bias added to the score'
set key off
plot for [c=2:17] '$csv/alibi_bias.csv' using 1:c with lines lw 1.2
"

plot angles "
set title 'Largest angle at L_{test} = 32768 / largest trained angle at 4096'
set xlabel 'pair i (pairs 46..63 never finished a turn in training)'
set ylabel 'ratio (> 1: out of the trained range)'
set logscale y
set yrange [0.5:12]
set xrange [0:63]
set arrow from 45.5, graph 0 to 45.5, graph 1 nohead dt 2 lc rgb 'gray40'
plot for [c=2:7] '$csv/angles.csv' using 1:c with linespoints pt 7 ps 0.4 title columnheader(c)
"

plot attention_extrapolation "
set title 'Synthetic attention past the training length (8 heads, similar keys)'
set xlabel 'sequence length T'
set ylabel 'entropy (nats)'
set y2label 'mass on keys > 1024 away'
set y2range [0:1]
set y2tics
set logscale x 2
plot '$csv/attention_extrapolation.csv' using 1:2 with linespoints title 'H NoPE', \
     '' using 1:3 with linespoints title 'H RoPE', '' using 1:4 with linespoints title 'H ALiBi', \
     '' using 1:5 axes x1y2 with linespoints dt 2 title 'far NoPE', \
     '' using 1:6 axes x1y2 with linespoints dt 2 title 'far RoPE', \
     '' using 1:7 axes x1y2 with linespoints dt 2 title 'far ALiBi'
"
