#!/bin/sh
# pairs.sh runs two sides of one connector benchmark, each in a process
# of its own, in the order A B B A, ROUNDS times (so 2*ROUNDS runs of
# each side), and prints the benchmark lines, for benchstat:
#
#	go test -c -o bench.connectors.test ./bench/connectors/
#	sh bench/connectors/pairs.sh ./bench.connectors.test KafkaConsumeDecode client sluice 10 100000x > pairs.txt
#	go run golang.org/x/perf/cmd/benchstat@latest -col /impl pairs.txt
#
# A side alone in its process is not helped or hurt by the sides before
# it: run in one process, later sides ran faster (a heap the earlier ones
# had grown); A B B A cancels a drift of the machine's speed.
set -eu
bin=$1 bench=$2 a=$3 b=$4 rounds=${5:-10} benchtime=${6:-100000x}
case $benchtime in
1x)
	# The only run would be the one that warms the process up.
	echo "pairs.sh: a benchtime of 1x times the warm-up run; give more" >&2
	exit 2
	;;
esac
side() {
	out=$("$bin" -test.run='^$' -test.bench="^Benchmark$bench\$/^impl=$1\$" -test.benchtime="$benchtime") || {
		echo "pairs.sh: side $1 failed:" >&2
		printf '%s\n' "$out" >&2
		exit 1
	}
	printf '%s\n' "$out" | grep '^Benchmark'
}
i=0
while [ "$i" -lt "$rounds" ]; do
	side "$a"
	side "$b"
	side "$b"
	side "$a"
	i=$((i + 1))
done
