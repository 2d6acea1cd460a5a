"""``ksched run``: the arguments of the live scheduler, handed to :func:`ksched.loop.run.run`."""

from __future__ import annotations

import argparse
import dataclasses


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser(
        "run",
        help="schedule pods with schedulerName matching a profile on a live cluster",
        description="In a pod it uses the service account; elsewhere --kubeconfig, $KUBECONFIG or "
        "~/.kube/config. Example: ksched run --kubeconfig ~/.kube/config --address 127.0.0.1:10259",
    )
    r.add_argument("--config", help="KschedConfiguration file (default: one profile named ksched)")
    r.add_argument("--kubeconfig")
    r.add_argument(
        "--address",
        default="0.0.0.0:10259",
        help="host:port for /healthz, /livez, /readyz, /metrics, /status and /shadow, served over HTTPS: "
        "the probes to anyone, the rest to whom the API server authorizes (TokenReview or a client "
        "certificate, then a SubjectAccessReview for get on the path; see ClusterRole ksched-metrics-reader)",
    )
    r.add_argument(
        "--tls-cert-file",
        help="PEM serving certificate for --address, read again when it changes "
        "(default: a self-signed one generated at start)",
    )
    r.add_argument("--tls-private-key-file", help="PEM private key of --tls-cert-file")
    r.add_argument(
        "--insecure-serving",
        action="store_true",
        help="serve --address over plain HTTP to anyone, without authentication "
        "(local development, tests and benchmarks only)",
    )
    r.add_argument("--identity", help="leader-election identity (default: hostname_uuid)")
    r.add_argument(
        "--no-leader-elect", action="store_true", help="run without leader election (a single replica only)"
    )
    r.add_argument(
        "--shadow",
        action="store_true",
        help="bind nothing: compare with where other schedulers bind pods (same as shadow.enabled: true)",
    )
    r.set_defaults(func=_run, verbose=True)


def _run(args: argparse.Namespace) -> int:
    from ksched.config import load_config
    from ksched.config.values import as_host_port
    from ksched.errors import KschedError
    from ksched.loop.run import run
    from ksched.loop.serving import ServingOptions

    config = load_config(args.config)
    as_host_port(args.address, "--address")
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise KschedError("--tls-cert-file and --tls-private-key-file go together: give both or neither")
    if args.insecure_serving and args.tls_cert_file:
        raise KschedError("--insecure-serving serves plain HTTP: drop --tls-cert-file or --insecure-serving")
    serving = ServingOptions(args.insecure_serving, args.tls_cert_file, args.tls_private_key_file)
    if args.no_leader_elect:
        config = dataclasses.replace(
            config, leader_election=dataclasses.replace(config.leader_election, leader_elect=False)
        )
    if args.shadow:
        config = dataclasses.replace(config, shadow=dataclasses.replace(config.shadow, enabled=True))
    return run(config, args.kubeconfig, args.address, args.identity, serving)
