"""Names fixed by Gardener's contracts and by this extension's charts."""

from __future__ import annotations

EXTENSION_NAME = "gardener-extension-cri-resmgr"
EXTENSION_TYPE = "cri-resmgr-extension"
FINALIZER = "extensions.gardener.cloud/cri-resmgr-extension"

# Gardener API coordinates.
EXTENSIONS_GROUP = "extensions.gardener.cloud"
EXTENSIONS_VERSION = "v1alpha1"
EXTENSIONS_PLURAL = "extensions"
CLUSTERS_PLURAL = "clusters"
RESOURCES_GROUP = "resources.gardener.cloud"
RESOURCES_VERSION = "v1alpha1"
MANAGED_RESOURCES_PLURAL = "managedresources"

# Operation annotation (v1beta1constants.GardenerOperation) and its values.
OPERATION_ANNOTATION = "gardener.cloud/operation"
OPERATION_RECONCILE = "reconcile"
OPERATION_MIGRATE = "migrate"
OPERATION_RESTORE = "restore"
OPERATION_WAIT_FOR_STATE = "wait-for-state"
# Shoot annotation asking extensions to drop resources without waiting.
FORCE_DELETION_ANNOTATION = "confirmation.gardener.cloud/force-deletion"

# ManagedResources and their secrets.
MANAGED_RESOURCE_NAME = "extension-runtime-cri-resmgr"
MONITORING_MANAGED_RESOURCE_NAME = "extension-cri-resmgr-monitoring"
# The job label of our series in the shoot Prometheus (the ScrapeConfig sets it; the alerts select on it).
SCRAPE_JOB_NAME = "cri-resmgr"
SECRET_PREFIX = "managedresource-"
ORIGIN_LABEL = "origin"
ORIGIN_VALUE = "gardener-extension-cri-resmgr"
SHOOT_NO_CLEANUP_LABEL = "shoot.gardener.cloud/no-cleanup"
GARBAGE_COLLECTABLE_LABEL = "resources.gardener.cloud/garbage-collectable-reference"
REFERENCE_ANNOTATION_PREFIX = "reference.resources.gardener.cloud/"
SEED_RESOURCE_CLASS = "seed"
# Key inside the managed-resource secret; the Go extension used the same one.
SECRET_DATA_KEY = "installation_chart"

# Health reporting.
HEALTH_CONDITION_TYPE = "SystemComponentsHealthy"
REASON_SUCCESSFUL = "HealthCheckSuccessful"
REASON_UNSUCCESSFUL = "HealthCheckUnsuccessful"
REASON_PROGRESSING = "HealthCheckProgressing"
REASON_CONDITION_CHECK_ERROR = "ConditionCheckError"

HEARTBEAT_LEASE_NAME = "gardener-extension-heartbeat"

# Base configs ConfigMap rendered by charts/gardener-extension-cri-resmgr.
CONFIGS_CONFIGMAP_NAME = "gardener-extension-cri-resmgr-configs"
CONFIGMAP_NAMESPACE_ENV = "EXTENSION_CONFIGMAP_NAMESPACE"
IMAGEVECTOR_OVERWRITE_ENV = "IMAGEVECTOR_OVERWRITE"

# Images in charts/images.yaml.
INSTALLER_IMAGE = "gardener-extension-cri-resmgr-installation"
AGENT_IMAGE = "gardener-extension-cri-resmgr-agent"

INSTALLATION_RELEASE_NAME = "cri-resmgr-installation"
SHOOT_SYSTEM_NAMESPACE = "kube-system"
WORKER_POOL_LABEL = "worker.gardener.cloud/pool"
