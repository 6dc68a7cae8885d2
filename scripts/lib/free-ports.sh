# Sourced by the scripts that start servers on loopback (lib/loopback.sh,
# api-fuzz.sh, tests/compose.sh).
#
# free_ports N: N distinct free loopback ports, on one line. All N sockets
# are held open until every port is chosen: ports asked for one process at
# a time can repeat (the kernel may hand a just-released port out again),
# and two servers, or two services of one compose stack, cannot share one.
free_ports() {
  python3 -c 'import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))' "$1"
}
