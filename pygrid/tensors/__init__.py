from . import algebra
from .constant import ConstTensor, Gamma
from .sitetype import (
    LEVELS,
    ColourMatrix,
    ColourVector,
    Complex,
    Level,
    LorentzColourMatrix,
    LorentzComplex,
    Real,
    SiteType,
    SpinColourMatrix,
    SpinColourVector,
    SpinMatrix,
    SpinVector,
)
