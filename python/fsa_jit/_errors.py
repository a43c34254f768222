"""The exceptions of the package's libfsa calls (fsa_jit re-exports both). Apart from the code that raises
them, so that loading (_lib) and calling (_functions) share them without importing each other.
"""


class FsaLibraryNotFound(OSError):
    """libfsa could not be found or loaded."""


class FsaError(RuntimeError):
    """A libfsa call returned a status other than FSA_STATUS_OK."""

    def __init__(self, status, name, message, function=None, info=None):
        self.status = status
        self.name = name  # "FSA_STATUS_UNSUPPORTED"
        self.message = message  # fsa_last_error()
        self.function = function
        self.info = info or {}  # fsa_last_error_info() fields
        where = f"{function}: " if function else ""
        super().__init__(f"{where}{name} ({status}): {message}")
