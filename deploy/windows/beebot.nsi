; BeeBot grid client for Windows: the per-user setup, for an employee who
; installs it by hand (no administrator rights). Built by build.sh with
; NSIS's makensis:
;   makensis -DVERSION=0.1.0 -DSRC=DIR -DOUT=FILE beebot.nsi
; where DIR holds beebot.exe, beebotw.exe and README.txt.
;
; It installs into the user's own %LOCALAPPDATA%\Programs\BeeBot, adds
; "BeeBot" to the Start menu (it opens the status page), registers the
; autostart (`beebot service install`: HKCU's Run key) and starts the
; client. Silently, with the project's invite code:
;   beebot-setup-0.1.0.exe /S /INVITE=beebot2-...
; The code is checked first (`beebot join --check`): a damaged one stops
; the setup before anything is written, with exit code 2. It is kept in
; HKCU\Software\BeeBot (Invite), which only this user can write, where the
; client finds it while it has not joined. Installed over a running client,
; the client is stopped first (its scans go on at its next start).
; Uninstalling leaves the project (`beebot leave`: the server releases this
; host's units; the data goes), removes the autostart, the Start-menu entry
; and the program.

; 64-bit, as the client is: it runs where the client can.
Target amd64-unicode
ManifestDPIAware true
SetCompressor /SOLID lzma
RequestExecutionLevel user

!include "FileFunc.nsh"
!include "LogicLib.nsh"

!ifndef VERSION
  !error "pass -DVERSION=x.y.z"
!endif
!ifndef SRC
  !error "pass -DSRC=directory of beebot.exe, beebotw.exe and README.txt"
!endif
!ifndef OUT
  !error "pass -DOUT=output file"
!endif

!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\BeeBot"
!define INVITE_KEY "Software\BeeBot"

Name "BeeBot"
OutFile "${OUT}"
InstallDir "$LOCALAPPDATA\Programs\BeeBot"
BrandingText "BeeBot grid ${VERSION}"
ShowInstDetails show
ShowUninstDetails show

VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "BeeBot"
VIAddVersionKey "CompanyName" "BeeBot grid"
VIAddVersionKey "FileDescription" "BeeBot grid client setup"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "LegalCopyright" "BeeBot grid maintainers"

Page instfiles
UninstPage instfiles

Var Invite
Var Tries

; Remove the program's two executables, trying again for up to 10 s while
; Windows still holds them (a client that was just stopped is still exiting).
!macro RemovePrograms
  StrCpy $Tries 0
  ${Do}
    ClearErrors
    Delete "$INSTDIR\beebot.exe"
    Delete "$INSTDIR\beebotw.exe"
    ${IfNot} ${FileExists} "$INSTDIR\beebot.exe"
    ${AndIfNot} ${FileExists} "$INSTDIR\beebotw.exe"
      ${Break}
    ${EndIf}
    IntOp $Tries $Tries + 1
    ${If} $Tries >= 40
      ${Break}
    ${EndIf}
    Sleep 250
  ${Loop}
!macroend

; Stop with a message (shown unless silent) and an exit code.
!macro Fail code message
  SetErrorLevel ${code}
  DetailPrint "${message}"
  MessageBox MB_ICONSTOP|MB_OK "${message}" /SD IDOK
  Abort "${message}"
!macroend

Section "BeeBot"
  ${GetParameters} $0
  ClearErrors
  ${GetOptions} $0 "/INVITE=" $Invite
  ${If} ${Errors}
    StrCpy $Invite ""
  ${EndIf}

  ; The code is checked by the client itself before anything is written,
  ; through the environment (never on a command line others can read).
  ${If} $Invite != ""
    InitPluginsDir
    SetOutPath "$PLUGINSDIR"
    File "/oname=$PLUGINSDIR\beebot.exe" "${SRC}\beebot.exe"
    System::Call 'Kernel32::SetEnvironmentVariable(t "BEEBOT_INVITE", t "$Invite")'
    nsExec::ExecToStack '"$PLUGINSDIR\beebot.exe" join --check'
    Pop $1
    Pop $2
    System::Call 'Kernel32::SetEnvironmentVariable(t "BEEBOT_INVITE", p 0)'
    Delete "$PLUGINSDIR\beebot.exe"
    ${If} $1 != 0
      !insertmacro Fail 2 "BeeBot was not installed: the invite code given (/INVITE=) cannot be used: $2"
    ${EndIf}
  ${EndIf}

  ; Over a running client: stop it, its scans checkpointed, and wait until
  ; its files are free.
  ${If} ${FileExists} "$INSTDIR\beebot.exe"
    nsExec::ExecToLog '"$INSTDIR\beebot.exe" stop'
    Pop $1
    !insertmacro RemovePrograms
  ${EndIf}

  SetOutPath "$INSTDIR"
  ClearErrors
  File "${SRC}\beebot.exe"
  File "${SRC}\beebotw.exe"
  File "${SRC}\README.txt"
  ${If} ${Errors}
    !insertmacro Fail 3 "BeeBot was not installed: cannot write its files in $INSTDIR (is a BeeBot still running?)"
  ${EndIf}

  ${If} $Invite != ""
    WriteRegStr HKCU "${INVITE_KEY}" "Invite" "$Invite"
  ${EndIf}

  CreateShortcut "$SMPROGRAMS\BeeBot.lnk" "$INSTDIR\beebotw.exe" "open" \
    "$INSTDIR\beebot.exe" 0 SW_SHOWNORMAL "" "See and steer the BeeBot grid client"

  WriteUninstaller "$INSTDIR\uninstall.exe"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "BeeBot"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "BeeBot grid"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\beebot.exe"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1

  ; The autostart, and the client started now; loudly when it cannot be.
  nsExec::ExecToStack '"$INSTDIR\beebot.exe" service install'
  Pop $1
  Pop $2
  DetailPrint "$2"
  ${If} $1 != 0
    !insertmacro Fail 4 "BeeBot was installed, but its autostart could not be registered: $2"
  ${EndIf}

  ${IfNot} ${Silent}
    Exec '"$INSTDIR\beebotw.exe" open'
  ${EndIf}
SectionEnd

Section "Uninstall"
  ; Leave the project: the runner stops (its units are given back to the
  ; server), and this user's BeeBot data goes. Not joined: nothing to leave.
  nsExec::ExecToLog '"$INSTDIR\beebot.exe" leave'
  Pop $1
  nsExec::ExecToLog '"$INSTDIR\beebot.exe" service uninstall'
  Pop $1
  ; A runner that would not stop keeps its files busy: stop it again.
  nsExec::ExecToLog '"$INSTDIR\beebot.exe" stop'
  Pop $1
  ; The note that this home left keeps an installer's code from joining
  ; again; with the code gone below, it goes too, and the folders if empty.
  Delete "$LOCALAPPDATA\BeeBot\beebot\data\left.json"
  RMDir "$LOCALAPPDATA\BeeBot\beebot\data"
  RMDir "$LOCALAPPDATA\BeeBot\beebot\config"
  RMDir "$LOCALAPPDATA\BeeBot\beebot"
  RMDir "$LOCALAPPDATA\BeeBot"
  Delete "$SMPROGRAMS\BeeBot.lnk"
  !insertmacro RemovePrograms
  Delete "$INSTDIR\README.txt"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  DeleteRegValue HKCU "Software\Microsoft\Windows\CurrentVersion\Run" "BeeBot"
  DeleteRegKey HKCU "${INVITE_KEY}"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
SectionEnd
