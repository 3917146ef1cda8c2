"""Kubernetes API access shared by the operator's modules."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


def load_api_client(kubeconfig: str | None = None, *, pool_size: int = 16) -> client.ApiClient:
    """An ApiClient from an explicit kubeconfig, $KUBECONFIG, or the in-cluster service account."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    # Reconciles run in a thread pool; give each worker a connection.
    configuration.connection_pool_maxsize = pool_size
    if not configuration.verify_ssl:
        import logging

        import urllib3

        # Said once here instead of a warning on every request.
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        logging.getLogger("extension").warning("TLS verification of the API server is disabled by the kubeconfig")
    return client.ApiClient(configuration)


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, ApiException) and err.status == 404


def is_conflict(err: BaseException) -> bool:
    return isinstance(err, ApiException) and err.status == 409


@dataclass
class Apis:
    """The typed API groups the extension uses, over one ApiClient."""

    api_client: client.ApiClient

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
