"""A rank's GPU is named by its UUID where the capture recorded one, else by its PCI address
(the 2-GPU recordings of 2026-11-26 carry no UUID: both ranks must still be told apart)."""
from hookmagic.common.devices import gpu_identity


def test_uuid_wins():
    assert gpu_identity({"uuid": "GPU-0a1b", "pci": [0, 6, 0]}) == "GPU-0a1b"


def test_pci_address_when_no_uuid():
    assert gpu_identity({"pci": [0, 0x1a, 0]}) == "PCI 0000:1a:00"
    assert gpu_identity({"pci": [0, 6, 0]}) != gpu_identity({"pci": [0, 7, 0]})


def test_nothing_known_is_empty():
    assert gpu_identity({}) == ""
    assert gpu_identity({"pci": [-1, -1, -1]}) == ""
