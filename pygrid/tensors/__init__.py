from . import algebra
from .constant import ConstTensor, Gamma
from .sitetype import (
    LEVELS, Complex, ColourMatrix, ColourVector, Level, LorentzColourMatrix, LorentzComplex, Real,
    SiteType, SpinColourMatrix, SpinColourVector, SpinMatrix, SpinVector,
)
