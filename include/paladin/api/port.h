// Ports for listeners that a program picks for itself (the demo's agents, tests).
#pragma once

namespace paladin::api {

// A TCP port P with P..P+count-1 free on loopback now, chosen at random below the kernel's
// ephemeral range (ip_local_port_range): outgoing connections take their local ports from that
// range, so a port there that is free when chosen may be taken before its listener binds it.
// 0 when none was found.
int FreeLoopbackPorts(int count = 1);

}  // namespace paladin::api
