// Package chaos injects faults into real Tenure processes on loopback and
// checks, from the streams alone, that nothing went wrong.
//
// Run (what `tenure chaos`, `make chaos` and `make chaos-short` call) starts
// nats-server processes (one server, or a 3-node cluster with replicated
// streams) running the accounts `tenure auth init` generates, two `tenure
// serve` coordinators, the web board (`tenure ui` on loopback, operator
// actions on, published as the board's ops user), worker processes (`tenure chaos worker`: RunWorker,
// the worker SDK on a journaled connection), a hostile worker (`tenure
// chaos hostile`: RunHostile) and a dispatcher that offers and cancels jobs,
// each connected with its own credentials (auth.go). Then it runs seeded
// schedules of faults: coordinators SIGKILLed at random points and
// restarted, a worker that holds leases SIGSTOPped for longer than its
// lease and resumed, the nats-server SIGKILLed and restarted on its store,
// and in the cluster the stream leaders stepped down and the nodes
// SIGKILLed one at a time. Workers keep acquiring, renewing, progressing
// and completing throughout, and run the jobs of a queue (ChaosQueue,
// worker.Run) that the dispatcher submits to during every schedule; during
// every schedule's faults the hostile worker, holding nothing but a
// worker's credentials, attacks (AttackTypes: the bad inputs of its
// catalogue, claims under guessed lease ids, consumer hogging, forged
// deliveries, predictable tick ids, floods, the web board without a
// credential: a worker on the board's host reaches its loopback; the
// inputs of a non-holder whose verdicts told it, before rules revision 5,
// the holder's lease id or a queue job's payload, and claims under what
// they told; and the queue modes: capacity announced on the workers' queue
// and every offer declined, ACKed and released, never ACKed, or ACKed and
// left to expire).
//
// Every client's connection dials through a Tap, which journals from the
// wire every input the client sent and every PubAck it received. After
// each schedule, once the faults have stopped and two lease durations have
// passed, Check compares both streams with the journals and with the fold:
// no acknowledged input lost, no stored input that no client sent, no two
// holders of one job at once, no accepted effect from a stale generation,
// a gapless decision chain equal to the fold of the input stream; the
// audit package must reproduce everything, and Liveness requires every job
// not cancelled to have ended within two lease durations after the faults
// stopped. The hostile checks (HostileResult) require that no hostile input
// was accepted on, or changed, another actor's lease, that only holders,
// time and operators ended leases, that every case of the catalogue got
// its verdict or was refused by the server, and that the board refused
// every request made without a credential (and showed no lease id of the
// log on /healthz and /metrics, open to anyone), that no verdict told it
// another holder's lease id or a payload (whatever the rules revision) and
// no hostile claim froze a job in an ownership conflict; and of the queue
// (checkQueues), that no queue job ended DEAD or FAILED or was completed
// twice, that every one was completed by an honest worker once the
// workload drained, and that the hostile worker's refusals cost it strikes
// of its standing. The checks are pure functions
// of the streams, the journals and the hostile workers' records, so they
// are tested on synthetic logs.
package chaos
