from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SetConfigRequest(_message.Message):
    __slots__ = ("node_name", "config", "source")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    config: _containers.ScalarMap[str, str]
    source: str
    def __init__(self, node_name: _Optional[str] = ..., config: _Optional[_Mapping[str, str]] = ..., source: _Optional[str] = ...) -> None: ...

class SetConfigReply(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...

class SetAdjustmentRequest(_message.Message):
    __slots__ = ("node_name", "adjustments")
    class AdjustmentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    ADJUSTMENTS_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    adjustments: _containers.ScalarMap[str, str]
    def __init__(self, node_name: _Optional[str] = ..., adjustments: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AdjustmentResult(_message.Message):
    __slots__ = ("error", "container_errors", "applied")
    class ContainerErrorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ERRORS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    error: str
    container_errors: _containers.ScalarMap[str, str]
    applied: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error: _Optional[str] = ..., container_errors: _Optional[_Mapping[str, str]] = ..., applied: _Optional[_Iterable[str]] = ...) -> None: ...

class SetAdjustmentReply(_message.Message):
    __slots__ = ("results", "error")
    class ResultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AdjustmentResult
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AdjustmentResult, _Mapping]] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    results: _containers.MessageMap[str, AdjustmentResult]
    error: str
    def __init__(self, results: _Optional[_Mapping[str, AdjustmentResult]] = ..., error: _Optional[str] = ...) -> None: ...

class GetPlacementsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Placement(_message.Message):
    __slots__ = ("namespace", "pod", "pod_uid", "container", "container_id", "cpus", "mems", "pool", "unpinned", "detail")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    UNPINNED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    pod: str
    pod_uid: str
    container: str
    container_id: str
    cpus: str
    mems: str
    pool: str
    unpinned: str
    detail: str
    def __init__(self, namespace: _Optional[str] = ..., pod: _Optional[str] = ..., pod_uid: _Optional[str] = ..., container: _Optional[str] = ..., container_id: _Optional[str] = ..., cpus: _Optional[str] = ..., mems: _Optional[str] = ..., pool: _Optional[str] = ..., unpinned: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class GetPlacementsReply(_message.Message):
    __slots__ = ("placements", "policy")
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    placements: _containers.RepeatedCompositeFieldContainer[Placement]
    policy: str
    def __init__(self, placements: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., policy: _Optional[str] = ...) -> None: ...

class PlacementChange(_message.Message):
    __slots__ = ("container", "container_id", "old_cpus", "new_cpus", "old_mems", "new_mems", "old_pool", "new_pool", "old_unpinned", "new_unpinned", "error")
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_CPUS_FIELD_NUMBER: _ClassVar[int]
    NEW_CPUS_FIELD_NUMBER: _ClassVar[int]
    OLD_MEMS_FIELD_NUMBER: _ClassVar[int]
    NEW_MEMS_FIELD_NUMBER: _ClassVar[int]
    OLD_POOL_FIELD_NUMBER: _ClassVar[int]
    NEW_POOL_FIELD_NUMBER: _ClassVar[int]
    OLD_UNPINNED_FIELD_NUMBER: _ClassVar[int]
    NEW_UNPINNED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    container: str
    container_id: str
    old_cpus: str
    new_cpus: str
    old_mems: str
    new_mems: str
    old_pool: str
    new_pool: str
    old_unpinned: str
    new_unpinned: str
    error: str
    def __init__(self, container: _Optional[str] = ..., container_id: _Optional[str] = ..., old_cpus: _Optional[str] = ..., new_cpus: _Optional[str] = ..., old_mems: _Optional[str] = ..., new_mems: _Optional[str] = ..., old_pool: _Optional[str] = ..., new_pool: _Optional[str] = ..., old_unpinned: _Optional[str] = ..., new_unpinned: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class DryRunConfigReply(_message.Message):
    __slots__ = ("error", "policy", "containers", "changes")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    error: str
    policy: str
    containers: int
    changes: _containers.RepeatedCompositeFieldContainer[PlacementChange]
    def __init__(self, error: _Optional[str] = ..., policy: _Optional[str] = ..., containers: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[PlacementChange, _Mapping]]] = ...) -> None: ...
